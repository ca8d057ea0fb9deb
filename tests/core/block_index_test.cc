#include "core/block_index.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/recent_requests.h"

namespace kvtier::internal {
namespace {

NsKey K(uint64_t i) { return NsKey{NamespaceId{1}, BlockKey{0, i}}; }

IndexEntry* AddReady(BlockIndex& idx, uint64_t i, IndexEntry* parent, size_t tier, uint64_t t) {
  IndexEntry* e = idx.Insert(K(i), parent, 100);
  e->state = EntryState::kReady;
  idx.AddLocation(e, tier, t);
  return e;
}

bool AlwaysDroppable(const IndexEntry&, uint32_t) { return true; }

TEST(BlockIndex, VictimsAreLeastRecentLeavesOnly) {
  BlockIndex idx(2);
  // Chain 1 -> 2 -> 3, then an unrelated block 4, all in tier 0.
  IndexEntry* a = AddReady(idx, 1, nullptr, 0, 1);
  IndexEntry* b = AddReady(idx, 2, a, 0, 2);
  IndexEntry* c = AddReady(idx, 3, b, 0, 3);
  IndexEntry* d = AddReady(idx, 4, nullptr, 0, 4);
  EXPECT_EQ(a->children, 1u);
  EXPECT_EQ(a->children_in[0], 1u);
  auto v = idx.Victims(0, 1, 100, AlwaysDroppable);
  // 1 and 2 have children in tier 0; 3 is older than 4.
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], c);
  // Once 3 is chosen, 2 (used before 4) is the least recent leaf, then 1.
  v = idx.Victims(0, 10, 100, AlwaysDroppable);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0], c);
  EXPECT_EQ(v[1], b);
  EXPECT_EQ(v[2], a);
  EXPECT_EQ(v[3], d);
  // Touched deepest first (as the runtime does), a chain leaves in one
  // batch, children before parents.
  idx.Touch(d, 5, true);
  idx.Touch(c, 6, true);
  idx.Touch(b, 7, true);
  idx.Touch(a, 8, true);
  v = idx.Victims(0, 10, 100, AlwaysDroppable);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0], d);
  EXPECT_EQ(v[1], c);
  EXPECT_EQ(v[2], b);
  EXPECT_EQ(v[3], a);
  idx.Touch(c, 9, true);  // now c is the most recent: its ancestors follow it out
  v = idx.Victims(0, 3, 100, AlwaysDroppable);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], d);
  EXPECT_EQ(v[1], c);
  EXPECT_EQ(v[2], b);
  c->pins = 1;
  d->pins = 1;
  EXPECT_TRUE(idx.Victims(0, 10, 100, AlwaysDroppable).empty()) << "pinned blocks stay";
}

// Chain 1 -> 2 and block 4 in tier 0, 5 in tier 1; 4 is used, then a use of
// 1, 2 ends at 2, which then moves down: of the leaves 1 and 4, which is
// older?
std::vector<IndexEntry*> LeavesAfterAUseThrough(BlockIndex& idx, IndexEntry** a, IndexEntry** e) {
  *a = AddReady(idx, 1, nullptr, 0, 1);
  IndexEntry* b = AddReady(idx, 2, *a, 0, 2);
  IndexEntry* d = AddReady(idx, 4, nullptr, 0, 3);
  *e = AddReady(idx, 5, nullptr, 1, 4);
  idx.Touch(d, 5, true);
  idx.Touch(b, 6, true);  // deepest first, as the runtime touches
  idx.Touch(*a, 6, false);
  idx.Touch(*e, 6, false);
  idx.AddLocation(b, 1, 7);
  idx.DropLocation(b, 0);
  return idx.Victims(0, 2, 100, AlwaysDroppable);
}

// Tier 0 refreshes only the deepest hit (flop_aware): a block a use passed
// through on the way to its child keeps its recency there, so once the
// child has gone it leaves before blocks used since it was last the end of
// a use.
TEST(BlockIndex, ADeepestOnlyTierRefreshesOnlyTheDeepestHit) {
  BlockIndex idx(2);
  idx.set_deepest_only(1U << 0);
  IndexEntry* a = nullptr;
  IndexEntry* e = nullptr;
  auto v = LeavesAfterAUseThrough(idx, &a, &e);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], a);
  EXPECT_EQ(a->last_access_ns, 6u);
  EXPECT_EQ(a->deepest_use_ns, 1u);
  EXPECT_EQ(e->deepest_use_ns, 4u);
  // With every hit refreshed, 1 was used after 4.
  BlockIndex all(2);
  v = LeavesAfterAUseThrough(all, &a, &e);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[1], a);
}

// A copy made from another tier (staged into the hub for a load, or moved
// down) is no use of the block: only the load's deepest hit is. Staging
// used to stamp every staged block as just used for the deepest-only tier.
TEST(BlockIndex, ACopyFromAnotherTierIsNoUse) {
  BlockIndex idx(2);
  idx.set_deepest_only(1U << 1);
  IndexEntry* a = AddReady(idx, 1, nullptr, 1, 1);
  IndexEntry* b = AddReady(idx, 2, a, 1, 2);
  idx.AddLocation(a, 0, 5);  // both staged into tier 0 for a load
  idx.AddLocation(b, 0, 5);
  idx.Touch(b, 5, true);
  idx.Touch(a, 5, false);
  EXPECT_EQ(a->deepest_use_ns, 1u);
  EXPECT_EQ(b->deepest_use_ns, 5u);
  IndexEntry* c = AddReady(idx, 3, nullptr, 0, 6);  // stored anew: a use
  EXPECT_EQ(c->deepest_use_ns, 6u);
  idx.AddLocation(c, 1, 7);
  EXPECT_EQ(c->deepest_use_ns, 6u);
}

TEST(BlockIndex, MovingALeafDownMakesItsParentALeafOfTheUpperTier) {
  BlockIndex idx(2);
  IndexEntry* a = AddReady(idx, 1, nullptr, 0, 1);
  IndexEntry* b = AddReady(idx, 2, a, 0, 2);
  idx.AddLocation(b, 1, 3);
  idx.DropLocation(b, 0);
  EXPECT_EQ(a->children_in[0], 0u);
  EXPECT_EQ(a->children_in[1], 1u);
  auto v = idx.Victims(0, 10, 100, AlwaysDroppable);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], a);
  EXPECT_EQ(idx.blocks_in(0), 1u);
  EXPECT_EQ(idx.blocks_in(1), 1u);
  EXPECT_EQ(idx.bytes_in(1), 100u);
}

// A chain indexed root first (as a staged or adopted one is) has its
// ancestors at the least recent end, each with a child in the tier. They
// use up no scan: a pass with a small limit still finds the leaf, then the
// parents it frees, then the unrelated block.
TEST(BlockIndex, AncestorsAtTheLeastRecentEndUseUpNoScan) {
  BlockIndex idx(1);
  std::vector<IndexEntry*> chain;
  for (uint64_t i = 0; i < 1000; ++i) {
    chain.push_back(AddReady(idx, i, chain.empty() ? nullptr : chain.back(), 0, i));
  }
  IndexEntry* other = AddReady(idx, 5000, nullptr, 0, 1000);
  EXPECT_EQ(idx.leaves_in(0), 2u);
  auto v = idx.Victims(0, 3, 3, AlwaysDroppable);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], chain[999]);
  EXPECT_EQ(v[1], chain[998]);
  EXPECT_EQ(v[2], chain[997]);
  // The leaf leaving the tier makes its parent a leaf at its own recency.
  idx.DropLocation(chain[999], 0);
  EXPECT_EQ(idx.leaves_in(0), 2u);
  v = idx.Victims(0, 1, 1, AlwaysDroppable);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], chain[998]);
  chain[998]->pins = 1;  // in use: the scan goes on past it to the next leaf
  v = idx.Victims(0, 1, 2, AlwaysDroppable);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], other);
}

TEST(BlockIndex, ErasingTheLastChildErasesAncestorsWithoutCopies) {
  BlockIndex idx(1);
  IndexEntry* a = AddReady(idx, 1, nullptr, 0, 1);
  IndexEntry* b = AddReady(idx, 2, a, 0, 2);
  IndexEntry* c = AddReady(idx, 3, b, 0, 3);
  idx.DropLocation(a, 0);  // a lost its copy but still anchors the chain
  idx.DropLocation(c, 0);
  idx.Erase(c);
  EXPECT_EQ(idx.size(), 2u) << "b still has a copy, so a stays";
  idx.DropLocation(b, 0);
  idx.Erase(b);
  EXPECT_EQ(idx.size(), 0u);
  EXPECT_EQ(idx.Find(K(1)), nullptr);
}

// Request ids looked up before are repeats until `capacity` newer ids have
// pushed them out; id 0 (none) is never a repeat.
TEST(RecentRequests, RemembersTheLastCapacityIds) {
  RecentRequests recent(2);
  EXPECT_TRUE(recent.FirstSighting(1));
  EXPECT_FALSE(recent.FirstSighting(1));
  EXPECT_TRUE(recent.FirstSighting(0));
  EXPECT_TRUE(recent.FirstSighting(0));
  EXPECT_TRUE(recent.FirstSighting(2));
  EXPECT_FALSE(recent.FirstSighting(1));
  EXPECT_TRUE(recent.FirstSighting(3));  // 1 is forgotten
  EXPECT_TRUE(recent.FirstSighting(1));
  EXPECT_FALSE(recent.FirstSighting(3));
}

}  // namespace
}  // namespace kvtier::internal
