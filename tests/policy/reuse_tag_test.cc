// The reuse learner tags requests in order and follows at most
// ReuseModel::kMaxPending of them to their finish, dropping the oldest: that
// order must hold past 2^32 requests, and a tag used again must replace its
// request's ids in the count, not add to it.
#include <gtest/gtest.h>

#include <vector>

#include "policy/reuse_model.h"
#include "tests/policy/reuse_knobs.h"

namespace kvtier {
namespace {

using internal::ReuseModel;

using testing::ExactReuseKnobs;

// Requests of one fresh block each, from two before tag 2^32 on; one more
// than the bound, so the next request drops exactly one: the oldest (r0),
// not the first tagged after 2^32 (r2).
TEST(ReuseTagTest, OldestPendingGoesFirstPastTwoToThe32) {
  ReuseModel m(ExactReuseKnobs());
  m.TEST_SetNextTag((uint64_t{1} << 32) - 2);
  const uint64_t kBase = 1000;
  for (uint64_t r = 0; r <= ReuseModel::kMaxPending; ++r) {
    const std::vector<uint64_t> chain = {kBase + r};
    m.ObserveRequest(chain, 1);
  }
  const std::vector<uint64_t> last = {7};
  m.ObserveRequest(last, 1);  // drops one pending request
  const size_t length_class = ReuseModel::LengthClass(1);
  const size_t output_class = ReuseModel::kOutputBase + ReuseModel::OutputClass(100);
  for (uint64_t r : {uint64_t{0}, uint64_t{2}}) {
    const std::vector<uint64_t> chain = {kBase + r};
    m.ObserveFinish(chain, 100);
  }
  EXPECT_EQ(m.ClassOf(kBase), length_class) << "r0, the oldest, was dropped: its finish is unknown";
  EXPECT_EQ(m.ClassOf(kBase + 2), output_class) << "r2 is still followed";
}

TEST(ReuseTagTest, ATagUsedAgainReplacesItsIds) {
  ReuseModel m(ExactReuseKnobs());
  m.TEST_SetNextTag(5);
  const std::vector<uint64_t> a = {1, 2, 3}, b = {7, 8};
  m.ObserveRequest(a, 3);
  EXPECT_EQ(m.TEST_PendingIds(), 3u);
  m.TEST_SetNextTag(5);
  m.ObserveRequest(b, 2);
  EXPECT_EQ(m.TEST_PendingIds(), 2u);
  m.ObserveFinish(b, 10);
  EXPECT_EQ(m.TEST_PendingIds(), 0u);
}

}  // namespace
}  // namespace kvtier
