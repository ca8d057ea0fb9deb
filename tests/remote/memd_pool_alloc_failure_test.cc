// The kvtier-memd pool when memory runs out while it commits a block: the
// n-th allocation of one Commit throws bad_alloc (tests/core/alloc_failure.h)
// for n = 0, 1, ... until a commit makes fewer. Each commit either stores the
// block or answers ResourceExhausted with the pool as it was and the slot
// given back; a pool that kept a block in its LRU list without an index
// entry would fail (or crash) evicting it later.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/core/alloc_failure.h"
#include "tiers/remote/memd_pool.h"

namespace kvtier::internal::memd {
namespace {

using ::kvtier::testing::DisarmAllocationFailures;
using ::kvtier::testing::FailAllocationAfter;

constexpr uint64_t kSlot = 4096;
constexpr uint64_t kPayload = 1000;

// Reserves a slot and writes a valid stored block for `key` into it.
uint32_t Prepare(MemdPool& pool, NamespaceId ns, BlockKey key) {
  auto slot = pool.Reserve(kPayload + kBlockHeaderBytes);
  EXPECT_TRUE(slot.ok()) << slot.status().ToString();
  std::vector<std::byte> data(kPayload, std::byte{7});
  std::span<std::byte> dst = pool.SlotBytes(*slot, kPayload + kBlockHeaderBytes);
  EncodeBlockHeader(MakeBlockHeader(ns, key, data), dst);
  std::memcpy(dst.data() + kBlockHeaderBytes, data.data(), kPayload);
  return *slot;
}

TEST(MemdPoolAllocFailureTest, ACommitThatRunsOutOfMemoryLeavesThePoolAsItWas) {
  int failed = 0;
  for (long n = 0; n < 10000; ++n) {
    MemdPoolOptions o;
    o.pool_bytes = 4 * kSlot;
    o.slot_bytes = kSlot;
    o.hugepages = false;
    o.high_watermark = 1.0;  // evicts only when full
    o.low_watermark = 0.99;
    auto pool = MemdPool::Create(o, nullptr);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    MemdPool& p = **pool;
    for (uint64_t i = 0; i < 2; ++i) {
      const uint32_t s = Prepare(p, NamespaceId{1}, {0, i});
      ASSERT_TRUE(p.Commit(NamespaceId{1}, {0, i}, s, kPayload + kBlockHeaderBytes).ok());
    }
    // A namespace the pool has not seen: its usage entry is allocated too.
    const uint32_t slot = Prepare(p, NamespaceId{2}, {0, 9});
    FailAllocationAfter(n);
    const Status st = p.Commit(NamespaceId{2}, {0, 9}, slot, kPayload + kBlockHeaderBytes);
    const bool injected = DisarmAllocationFailures();
    if (st.ok()) {
      EXPECT_TRUE(p.Contains(NamespaceId{2}, {0, 9})) << n;
      EXPECT_EQ(p.used_slots(), 3u) << n;
    } else {
      ++failed;
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << n << ": " << st.ToString();
      EXPECT_FALSE(p.Contains(NamespaceId{2}, {0, 9})) << n;
      EXPECT_EQ(p.used_slots(), 2u) << n << ": the slot was not given back";
      for (const NamespaceUsage& u : p.GetStats().namespaces) EXPECT_NE(u.ns, 2u) << n;
    }
    // Turning the pool over evicts every block the LRU list holds.
    for (uint64_t i = 10; i < 18; ++i) {
      const uint32_t s = Prepare(p, NamespaceId{1}, {0, i});
      ASSERT_TRUE(p.Commit(NamespaceId{1}, {0, i}, s, kPayload + kBlockHeaderBytes).ok()) << n;
    }
    EXPECT_EQ(p.used_slots(), 4u) << n;
    if (!injected) break;
  }
  EXPECT_GT(failed, 0) << "no injected failure reached the commit";
}

}  // namespace
}  // namespace kvtier::internal::memd
