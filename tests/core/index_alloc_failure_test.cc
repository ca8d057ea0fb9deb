// The block index when memory runs out (tests/core/alloc_failure.h): a
// location added or dropped either goes whole or not at all, so the runtime
// can give a hub slot back after DropLocation and never index a freed slot;
// dropping a leaf (as Remove and eviction do) and adding a chain's next
// block allocate nothing at all.
#include <gtest/gtest.h>

#include <new>

#include "core/block_index.h"
#include "tests/core/alloc_failure.h"

namespace kvtier::internal {
namespace {

using ::kvtier::testing::DisarmAllocationFailures;
using ::kvtier::testing::FailEveryAllocation;

NsKey K(uint64_t i) { return NsKey{NamespaceId{1}, BlockKey{0, i}}; }

IndexEntry* AddReady(BlockIndex& idx, uint64_t i, IndexEntry* parent, size_t tier) {
  IndexEntry* e = idx.Insert(K(i), parent, 100);
  e->state = EntryState::kReady;
  idx.AddLocation(e, tier, 1);
  return e;
}

TEST(IndexAllocFailure, DroppingALeafAllocatesNothing) {
  BlockIndex idx(2);
  IndexEntry* a = AddReady(idx, 1, nullptr, 0);
  IndexEntry* b = AddReady(idx, 2, a, 0);
  FailEveryAllocation();
  idx.DropLocation(b, 0);  // a becomes the leaf, in b's place
  const bool injected = DisarmAllocationFailures();
  EXPECT_FALSE(injected);
  EXPECT_FALSE(b->In(0));
  EXPECT_EQ(idx.blocks_in(0), 1u);
  EXPECT_EQ(idx.leaves_in(0), 1u);
  EXPECT_EQ(a->children_in[0], 0u);
}

TEST(IndexAllocFailure, AddingAChainsNextBlockAllocatesNothing) {
  BlockIndex idx(2);
  IndexEntry* a = AddReady(idx, 1, nullptr, 0);
  IndexEntry* b = idx.Insert(K(2), a, 100);
  b->state = EntryState::kReady;
  FailEveryAllocation();
  idx.AddLocation(b, 0, 2);  // takes the place of a, which stops being a leaf
  const bool injected = DisarmAllocationFailures();
  EXPECT_FALSE(injected);
  EXPECT_TRUE(b->In(0));
  EXPECT_EQ(idx.leaves_in(0), 1u);
  auto v = idx.Victims(0, 10, 10, [](const IndexEntry&, uint32_t) { return true; });
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], b);  // the leaf first, then its parent
  EXPECT_EQ(v[1], a);
}

TEST(IndexAllocFailure, AnAddThatRunsOutOfMemoryChangesNothing) {
  BlockIndex idx(2);
  IndexEntry* a = AddReady(idx, 1, nullptr, 0);
  IndexEntry* b = idx.Insert(K(2), nullptr, 100);  // a root of its own: a new leaf
  b->state = EntryState::kReady;
  FailEveryAllocation();
  bool threw = false;
  try {
    idx.AddLocation(b, 0, 2);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  DisarmAllocationFailures();
  ASSERT_TRUE(threw);
  EXPECT_FALSE(b->In(0));
  EXPECT_EQ(idx.blocks_in(0), 1u);
  EXPECT_EQ(idx.leaves_in(0), 1u);
  idx.AddLocation(b, 0, 2);
  EXPECT_EQ(idx.leaves_in(0), 2u);
  EXPECT_TRUE(a->In(0));
}

TEST(IndexAllocFailure, ADropThatRunsOutOfMemoryChangesNothing) {
  BlockIndex idx(2);
  // a -> b -> c, all in tier 1: dropping b (not a leaf there) makes a one.
  IndexEntry* a = AddReady(idx, 1, nullptr, 1);
  IndexEntry* b = AddReady(idx, 2, a, 1);
  IndexEntry* c = AddReady(idx, 3, b, 1);
  FailEveryAllocation();
  bool threw = false;
  try {
    idx.DropLocation(b, 1);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  DisarmAllocationFailures();
  ASSERT_TRUE(threw);
  EXPECT_TRUE(b->In(1));
  EXPECT_EQ(a->children_in[1], 1u);
  EXPECT_EQ(idx.blocks_in(1), 3u);
  EXPECT_EQ(idx.bytes_in(1), 300u);
  EXPECT_EQ(idx.leaves_in(1), 1u);
  // With memory back the same drop goes through: a and c are the leaves.
  idx.DropLocation(b, 1);
  EXPECT_FALSE(b->In(1));
  EXPECT_EQ(idx.blocks_in(1), 2u);
  EXPECT_EQ(idx.leaves_in(1), 2u);
  auto v = idx.Victims(1, 10, 10, [](const IndexEntry&, uint32_t) { return true; });
  EXPECT_EQ(v.size(), 2u);
  EXPECT_TRUE(c->In(1));
}

}  // namespace
}  // namespace kvtier::internal
