// CqPoller::Post without memory to track its request: the completion-queue
// entry it reserved is given back. Each such failure used to shrink the
// queue for good, until every post answered Busy.
#include <gtest/gtest.h>

#include "io/rdma_verbs.h"
#include "tests/core/alloc_failure.h"

namespace kvtier::internal::rdma {
namespace {

TEST(CqPollerAllocFailureTest, APostWithoutMemoryGivesItsEntryBack) {
  CqPoller poller([](int, ibv_wc*) { return 0; }, 1);  // one entry; never completes
  int posted = 0;
  auto post = [&posted](uint64_t) {
    ++posted;
    return 0;
  };
  auto done = [](const Status&, uint32_t) {};
  testing::FailAllocationAfterOnThisThread(0);  // the request's record
  const Status refused = poller.Post(post, done);
  EXPECT_TRUE(testing::DisarmAllocationFailures())
      << "no allocation failed: the path was not tried";
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_EQ(posted, 0);
  const Status next = poller.Post(post, done);
  EXPECT_TRUE(next.ok()) << next.ToString();
  EXPECT_EQ(posted, 1);
}

}  // namespace
}  // namespace kvtier::internal::rdma
