// ShardedMap: the map the policies' learners and the block index keep their
// entries in, split so that growing rehashes one shard at a time.
#include "policy/sharded_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier::internal {
namespace {

using Map = ShardedMap<uint64_t, std::string>;

TEST(ShardedMapTest, FindEmplaceEraseRoundTrip) {
  Map m;
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.Find(7), nullptr);
  for (uint64_t i = 0; i < 10000; ++i) {
    auto [e, fresh] = m.TryEmplace(i * 3, std::to_string(i));
    ASSERT_TRUE(fresh);
    EXPECT_EQ(e->first, i * 3);
  }
  EXPECT_EQ(m.size(), 10000u);
  // An existing key keeps its value; the arguments are not used.
  auto [e, fresh] = m.TryEmplace(30, "other");
  EXPECT_FALSE(fresh);
  EXPECT_EQ(e->second, "10");
  for (uint64_t i = 0; i < 10000; ++i) {
    ASSERT_TRUE(m.Contains(i * 3));
    ASSERT_FALSE(m.Contains(i * 3 + 1));
    ASSERT_EQ(*m.Find(i * 3), std::to_string(i));
  }
  m[1] = "one";  // operator[] makes a missing entry
  EXPECT_EQ(m.size(), 10001u);
  EXPECT_EQ(*static_cast<const Map&>(m).Find(1), "one");
  EXPECT_TRUE(m.Erase(1));
  EXPECT_FALSE(m.Erase(1));
  EXPECT_FALSE(m.Erase(2));
  for (uint64_t i = 0; i < 10000; i += 2) ASSERT_TRUE(m.Erase(i * 3));
  EXPECT_EQ(m.size(), 5000u);
  EXPECT_EQ(m.Find(0), nullptr);
  EXPECT_EQ(*m.Find(3), "1");
}

// RecencyList keeps pointers to entries across inserts that rehash.
TEST(ShardedMapTest, EntriesStayInPlaceWhileTheMapGrows) {
  Map m;
  Map::value_type* first = m.TryEmplace(42, "answer").first;
  for (uint64_t i = 100; i < 200000; ++i) m.TryEmplace(i);
  EXPECT_EQ(m.TryEmplace(42).first, first);
  EXPECT_EQ(first->second, "answer");
}

// The NVMe tier scans its index for a region's blocks and drops them.
TEST(ShardedMapTest, ForEachVisitsAndEraseIfErasesEachEntryOnce) {
  ShardedMap<uint64_t, uint64_t> m;
  for (uint64_t i = 0; i < 5000; ++i) m.TryEmplace(i, i % 7);
  uint64_t visits = 0, sum = 0;
  m.ForEach([&](uint64_t k, uint64_t& v) {
    ++visits;
    sum += k;
    v += 100;  // values may change
  });
  EXPECT_EQ(visits, 5000u);
  EXPECT_EQ(sum, 4999u * 5000 / 2);
  EXPECT_EQ(*m.Find(8), 101u);
  std::vector<uint64_t> erased;
  EXPECT_EQ(m.EraseIf([&](uint64_t k, const uint64_t& v) {
    if (v != 103) return false;
    erased.push_back(k);
    return true;
  }),
            714u);  // i % 7 == 3 for i < 5000
  EXPECT_EQ(erased.size(), 714u);
  EXPECT_EQ(m.size(), 5000u - 714);
  for (uint64_t k : erased) EXPECT_FALSE(m.Contains(k));
  uint64_t left = 0;
  static_cast<const ShardedMap<uint64_t, uint64_t>&>(m).ForEach(
      [&](uint64_t, const uint64_t& v) { left += v == 103 ? 1000000 : 1; });
  EXPECT_EQ(left, 5000u - 714);
  // Shard by shard (as a caller dropping its lock between shards scans):
  // every entry once.
  uint64_t by_shard = 0;
  for (size_t i = 0; i < m.kShards; ++i) {
    m.ForEachIn(i, [&](uint64_t k, const uint64_t&) { by_shard += k + 1; });
  }
  uint64_t expected = 0;
  m.ForEach([&](uint64_t k, const uint64_t&) { expected += k + 1; });
  EXPECT_EQ(by_shard, expected);
}

// The point of sharding: no shard holds much more than its share, so the
// longest rehash moves about 1/kShards of the entries. Dense ids (a trace's
// block numbers) and ids that differ only in high or only in low bits.
TEST(ShardedMapTest, EveryShardHoldsAboutItsShare) {
  constexpr uint64_t kN = uint64_t{1} << 16;
  const std::vector<int> shifts = {0, 8, 16, 40, 48};
  for (int shift : shifts) {
    ShardedMap<uint64_t, char> m;
    for (uint64_t i = 0; i < kN; ++i) m.TryEmplace(i << shift, 0);
    ASSERT_EQ(m.size(), kN);
    EXPECT_LE(m.LargestShard(), 2 * kN / m.kShards) << "ids i << " << shift;
  }
}

}  // namespace
}  // namespace kvtier::internal
