#include "tiers/remote/memd_pool.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kvtier::internal::memd {
namespace {

constexpr uint64_t kSlot = 4096;
constexpr NamespaceId kNs{42};

std::unique_ptr<MemdPool> MakePool(uint64_t slots, double high = 1.0, double low = 0.99) {
  MemdPoolOptions o;
  o.pool_bytes = slots * kSlot;
  o.slot_bytes = kSlot;
  o.hugepages = false;
  o.high_watermark = high;
  o.low_watermark = low;
  auto p = MemdPool::Create(o, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

// Reserves, fills with a valid stored block and commits.
Status Store(MemdPool& pool, NamespaceId ns, BlockKey key, uint64_t payload = 1000) {
  auto slot = pool.Reserve(payload + kBlockHeaderBytes);
  if (!slot.ok()) return slot.status();
  std::vector<std::byte> data(payload, std::byte{7});
  std::span<std::byte> dst = pool.SlotBytes(*slot, payload + kBlockHeaderBytes);
  EncodeBlockHeader(MakeBlockHeader(ns, key, data), dst);
  std::memcpy(dst.data() + kBlockHeaderBytes, data.data(), payload);
  return pool.Commit(ns, key, *slot, payload + kBlockHeaderBytes);
}

// The index is sized for every slot at open: filling the pool, and
// turning it over, never rehashes it (under the lock every request takes).
TEST(MemdPoolTest, IndexNeverRehashesAsThePoolFills) {
  auto pool = MakePool(4096, 1.0, 0.9);
  const size_t buckets = pool->TEST_IndexBuckets();
  EXPECT_GE(buckets, 4096u);
  for (uint64_t i = 0; i < 3 * 4096; ++i) ASSERT_TRUE(Store(*pool, kNs, {9, i}, 100).ok()) << i;
  EXPECT_GT(pool->GetStats().evictions, 0u);
  EXPECT_EQ(pool->TEST_IndexBuckets(), buckets);
}

TEST(MemdPoolTest, StoresLooksUpAndCountsPerNamespace) {
  auto pool = MakePool(8);
  ASSERT_TRUE(Store(*pool, kNs, {1, 1}).ok());
  ASSERT_TRUE(Store(*pool, kNs, {1, 2}).ok());
  ASSERT_TRUE(Store(*pool, NamespaceId{7}, {1, 1}, 500).ok());
  EXPECT_TRUE(pool->Contains(kNs, {1, 1}));
  EXPECT_FALSE(pool->Contains(NamespaceId{8}, {1, 1}));
  auto f = pool->Lookup(kNs, {1, 2});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->stored_bytes, 1064u);
  Stats s = pool->GetStats();
  EXPECT_EQ(s.used_slots, 3u);
  EXPECT_EQ(s.slot_count, 8u);
  uint64_t ns42 = 0, ns7 = 0;
  for (const NamespaceUsage& u : s.namespaces) {
    if (u.ns == 42) ns42 = u.bytes;
    if (u.ns == 7) ns7 = u.bytes;
  }
  EXPECT_EQ(ns42, 2000u);
  EXPECT_EQ(ns7, 500u);
  EXPECT_TRUE(pool->Remove(kNs, {1, 1}));
  EXPECT_FALSE(pool->Remove(kNs, {1, 1}));
  EXPECT_EQ(pool->used_slots(), 2u);
}

TEST(MemdPoolTest, FullPoolEvictsLeastRecentlyUsed) {
  auto pool = MakePool(3);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(Store(*pool, kNs, {0, i}).ok());
  ASSERT_TRUE(pool->Lookup(kNs, {0, 0}).has_value());  // 1 is now the oldest
  ASSERT_TRUE(Store(*pool, kNs, {0, 3}).ok());
  EXPECT_TRUE(pool->Contains(kNs, {0, 0}));
  EXPECT_FALSE(pool->Contains(kNs, {0, 1}));
  EXPECT_EQ(pool->GetStats().evictions, 1u);
}

TEST(MemdPoolTest, HighWatermarkEvictsDownToLow) {
  auto pool = MakePool(10, 0.8, 0.5);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(Store(*pool, kNs, {0, i}).ok());
  EXPECT_EQ(pool->used_slots(), 8u) << "at the high mark, not above it";
  ASSERT_TRUE(Store(*pool, kNs, {0, 8}).ok());
  EXPECT_EQ(pool->used_slots(), 5u);
  EXPECT_EQ(pool->GetStats().evictions, 4u);
  EXPECT_FALSE(pool->Contains(kNs, {0, 3}));
  EXPECT_TRUE(pool->Contains(kNs, {0, 4}));
}

TEST(MemdPoolTest, PinnedSlotIsFreedOnlyAfterUnpin) {
  auto pool = MakePool(1);
  ASSERT_TRUE(Store(*pool, kNs, {0, 1}).ok());
  auto f = pool->Lookup(kNs, {0, 1});
  pool->Pin(f->slot);
  EXPECT_TRUE(pool->Remove(kNs, {0, 1}));
  EXPECT_EQ(pool->Reserve(100).status().code(), StatusCode::kResourceExhausted);
  pool->Unpin(f->slot);
  EXPECT_TRUE(pool->Reserve(100).ok());
}

// Looks a stored key up and pins its slot, as a GET being sent does.
uint32_t PinKey(MemdPool& pool, BlockKey key) {
  auto f = pool.Lookup(kNs, key);
  EXPECT_TRUE(f.has_value());
  if (!f.has_value()) return 0;
  pool.Pin(f->slot);
  return f->slot;
}

// Pinned blocks free nothing when evicted: above the high mark with only
// pinned blocks besides the new one, nothing is evicted, not even the block
// just committed.
TEST(MemdPoolTest, WatermarkEvictionSkipsPinnedAndKeepsTheNewBlock) {
  auto pool = MakePool(4, 0.75, 0.5);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(Store(*pool, kNs, {0, i}).ok());
  for (uint64_t i = 0; i < 3; ++i) PinKey(*pool, {0, i});
  ASSERT_TRUE(Store(*pool, kNs, {0, 3}).ok());
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(pool->Contains(kNs, {0, i})) << i;
  EXPECT_EQ(pool->GetStats().evictions, 0u);
  EXPECT_EQ(pool->used_slots(), 4u);
}

// Among pinned blocks, the oldest unpinned one is evicted; a block is
// evictable again once its last pin goes.
TEST(MemdPoolTest, EvictionTakesTheOldestUnpinnedBlock) {
  auto pool = MakePool(3);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(Store(*pool, kNs, {0, i}).ok());
  const uint32_t oldest = PinKey(*pool, {0, 0});
  // Reading 1 and 2 leaves the pinned 0 the least recently used.
  ASSERT_TRUE(pool->Lookup(kNs, {0, 1}).has_value());
  ASSERT_TRUE(pool->Lookup(kNs, {0, 2}).has_value());
  ASSERT_TRUE(Store(*pool, kNs, {0, 3}).ok());
  EXPECT_TRUE(pool->Contains(kNs, {0, 0}));
  EXPECT_FALSE(pool->Contains(kNs, {0, 1}));
  EXPECT_EQ(pool->GetStats().evictions, 1u);
  pool->Unpin(oldest);  // now the most recently used: 2 is the oldest
  ASSERT_TRUE(Store(*pool, kNs, {0, 4}).ok());
  EXPECT_TRUE(pool->Contains(kNs, {0, 0}));
  EXPECT_FALSE(pool->Contains(kNs, {0, 2}));
}

// A pool whose every block is pinned refuses a reservation and keeps them.
TEST(MemdPoolTest, ReserveOnAnAllPinnedPoolEvictsNothing) {
  auto pool = MakePool(2);
  for (uint64_t i = 0; i < 2; ++i) ASSERT_TRUE(Store(*pool, kNs, {0, i}).ok());
  const uint32_t first = PinKey(*pool, {0, 0});
  PinKey(*pool, {0, 1});
  EXPECT_EQ(pool->Reserve(100).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(pool->Contains(kNs, {0, 0}));
  EXPECT_TRUE(pool->Contains(kNs, {0, 1}));
  EXPECT_EQ(pool->GetStats().evictions, 0u);
  pool->Unpin(first);
  EXPECT_TRUE(pool->Reserve(100).ok());
  EXPECT_FALSE(pool->Contains(kNs, {0, 0}));
  EXPECT_TRUE(pool->Contains(kNs, {0, 1}));
}

// Pinning moves a block out of eviction's list and unpinning moves it back;
// removing a pinned block takes it off the pinned list.
TEST(MemdPoolTest, PinsMoveBlocksBetweenTheLists) {
  auto pool = MakePool(4);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(Store(*pool, kNs, {0, i}).ok());
  EXPECT_EQ(pool->TEST_Evictable(), 3u);
  EXPECT_EQ(pool->TEST_Pinned(), 0u);
  const uint32_t a = PinKey(*pool, {0, 0});
  const uint32_t b = PinKey(*pool, {0, 1});
  PinKey(*pool, {0, 1});  // a second pin of the same block
  EXPECT_EQ(pool->TEST_Evictable(), 1u);
  EXPECT_EQ(pool->TEST_Pinned(), 2u);
  pool->Unpin(a);
  pool->Unpin(b);  // still pinned once
  EXPECT_EQ(pool->TEST_Evictable(), 2u);
  EXPECT_EQ(pool->TEST_Pinned(), 1u);
  EXPECT_TRUE(pool->Remove(kNs, {0, 1}));
  EXPECT_EQ(pool->TEST_Pinned(), 0u);
  EXPECT_EQ(pool->TEST_Evictable(), 2u);
  pool->Unpin(b);  // its slot is freed now
  EXPECT_EQ(pool->used_slots(), 2u);
}

TEST(MemdPoolTest, CommitChecksTheStoredHeader) {
  auto pool = MakePool(2);
  auto slot = pool->Reserve(1064);
  ASSERT_TRUE(slot.ok());
  std::vector<std::byte> data(1000);
  EncodeBlockHeader(MakeBlockHeader(kNs, {9, 9}, data), pool->SlotBytes(*slot, 1064));
  Status s = pool->Commit(kNs, {9, 8}, *slot, 1064);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "stored block header names another block or size");
  EXPECT_EQ(pool->used_slots(), 0u);
  EXPECT_EQ(pool->Reserve(kSlot + 1).status().message(),
            "block of 4097 bytes does not fit a slot of 4096");
}

}  // namespace
}  // namespace kvtier::internal::memd
