// The C API's pins: pinned hits stay in the hub under pressure until
// unpinned, and pins may outlive their runtime.
#include <gtest/gtest.h>

#include <vector>

#include "tests/capi/c_api_test_util.h"

namespace kvtier::testing {
namespace {

struct PinFreer {
  void operator()(kvtier_pin* pin) const { kvtier_unpin(pin); }
};
using PinPtr = std::unique_ptr<kvtier_pin, PinFreer>;

// A hub of five 8 KiB blocks, and no tier below it: what leaves it is gone.
// Four blocks stay below its high watermark (0.95), so the mover leaves them.
const std::string kFiveBlocks = CapiConfig("40KiB");

size_t Hits(kvtier_runtime* rt, const std::vector<kvtier_key>& keys) {
  size_t hits = 0;
  EXPECT_EQ(kvtier_lookup(rt, keys.data(), keys.size(), nullptr, &hits, nullptr), KVTIER_OK);
  return hits;
}

TEST(CApiPinTest, PinnedHitsStayUntilUnpinned) {
  RuntimePtr rt = OpenText(kFiveBlocks);
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> a = ChainOf(rt.get(), 4, 1);
  const std::vector<kvtier_key> b = ChainOf(rt.get(), 4, 100'000);
  ASSERT_EQ(SaveBlocks(rt.get(), a, {0, 1, 2, 3}), KVTIER_OK) << kvtier_last_error();

  kvtier_pin* raw = nullptr;
  size_t hits = 0;
  std::vector<uint8_t> tiers(4, 9);
  ASSERT_EQ(kvtier_lookup_and_pin(rt.get(), a.data(), 4, nullptr, &hits, tiers.data(), &raw),
            KVTIER_OK);
  PinPtr pin(raw);
  EXPECT_EQ(hits, 4u);
  EXPECT_EQ(tiers, std::vector<uint8_t>(4, 0));
  // Room for one block of b while a is pinned (which the mover may then take
  // back): the rest of b fails, a stays.
  EXPECT_NE(SaveBlocks(rt.get(), b, {4, 5, 6, 7}), KVTIER_OK);
  EXPECT_EQ(Hits(rt.get(), a), 4u);
  EXPECT_LE(Hits(rt.get(), b), 1u);

  pin.reset();  // unpinned: b takes a's room
  ASSERT_EQ(SaveBlocks(rt.get(), b, {4, 5, 6, 7}), KVTIER_OK) << kvtier_last_error();
  EXPECT_EQ(Hits(rt.get(), b), 4u);
  EXPECT_LE(Hits(rt.get(), a), 1u);
}

TEST(CApiPinTest, PinsMayOutliveTheirRuntime) {
  RuntimePtr rt = OpenText(kFiveBlocks);
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> a = ChainOf(rt.get(), 2, 1);
  ASSERT_EQ(SaveBlocks(rt.get(), a, {0, 1}), KVTIER_OK);
  kvtier_pin* first = nullptr;
  kvtier_pin* second = nullptr;
  kvtier_pin* none = nullptr;
  size_t hits = 0;
  ASSERT_EQ(kvtier_lookup_and_pin(rt.get(), a.data(), 2, nullptr, &hits, nullptr, &first),
            KVTIER_OK);
  ASSERT_EQ(kvtier_lookup_and_pin(rt.get(), a.data(), 1, nullptr, &hits, nullptr, &second),
            KVTIER_OK);
  EXPECT_EQ(hits, 1u);
  const kvtier_key unknown{5, 6};
  ASSERT_EQ(kvtier_lookup_and_pin(rt.get(), &unknown, 1, nullptr, &hits, nullptr, &none),
            KVTIER_OK);
  EXPECT_EQ(hits, 0u);
  ASSERT_NE(none, nullptr);  // a pin of nothing, freed like any other
  kvtier_unpin(second);
  rt.reset();  // releases `first` and `none` through the runtime before it goes
  kvtier_unpin(first);
  kvtier_unpin(none);
  kvtier_unpin(nullptr);
}

TEST(CApiPinTest, BadArgumentsLeaveNoPin) {
  RuntimePtr rt = OpenText(kFiveBlocks);
  ASSERT_TRUE(rt);
  const kvtier_key key{1, 2};
  size_t hits = 0;
  kvtier_pin* pin = reinterpret_cast<kvtier_pin*>(1);
  EXPECT_EQ(kvtier_lookup_and_pin(rt.get(), nullptr, 1, nullptr, &hits, nullptr, &pin),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: keys is NULL");
  EXPECT_EQ(pin, nullptr);
  EXPECT_EQ(kvtier_lookup_and_pin(rt.get(), &key, 1, nullptr, nullptr, nullptr, &pin),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: hit_blocks is NULL");
  EXPECT_EQ(kvtier_lookup_and_pin(rt.get(), &key, 1, nullptr, &hits, nullptr, nullptr),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: pin is NULL");
}

}  // namespace
}  // namespace kvtier::testing
