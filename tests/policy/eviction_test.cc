// Exact eviction orders and α tuning.
#include <gtest/gtest.h>

#include <vector>

#include "kvtier/policy.h"

namespace kvtier {
namespace {

BlockMeta Leaf(uint64_t id, uint64_t last_use, double flops = 0, uint64_t bytes = 1) {
  BlockMeta b;
  b.id = id;
  b.last_use_ns = last_use;
  b.flops = flops;
  b.bytes = bytes;
  return b;
}

std::vector<uint64_t> Ids(const std::vector<BlockMeta>& v) {
  std::vector<uint64_t> out;
  for (const BlockMeta& b : v) out.push_back(b.id);
  return out;
}

std::unique_ptr<EvictionPolicy> Make(const char* name, const PolicyKnobs& k = {}) {
  auto p = CreateEvictionPolicy(name, k);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(*p);
}

TEST(EvictionTest, LruOrdersByLastUseStably) {
  auto p = Make("lru");
  std::vector<BlockMeta> c = {Leaf(1, 30), Leaf(2, 10), Leaf(3, 20), Leaf(4, 10)};
  p->Order(c, 0);
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{2, 4, 3, 1}));
  EXPECT_EQ(CreateEvictionPolicy("mru", {}).status().message(), "unknown eviction policy 'mru'");
}

TEST(EvictionTest, FlopAwareWeighsRecencyAgainstFlopsPerByte) {
  struct Case {
    double alpha;
    std::vector<uint64_t> want;
  };
  // id 1: oldest, deep (many FLOPs per byte); id 2: newest, shallow; id 3: middle.
  const Case cases[] = {
      {0.0, {1, 3, 2}},  // pure recency
      {0.8, {3, 1, 2}},  // 3: 0.5 + 0.2; 1: 0 + 0.8; 2: 1 + 0
      {4.0, {2, 3, 1}},  // FLOPs dominate: shallow first
  };
  for (const Case& c : cases) {
    PolicyKnobs k;
    k.flop_alpha = c.alpha;
    auto p = Make("flop_aware", k);
    std::vector<BlockMeta> v = {Leaf(1, 0, 100), Leaf(2, 10, 0), Leaf(3, 5, 25)};
    p->Order(v, 0);
    EXPECT_EQ(Ids(v), c.want) << "alpha " << c.alpha;
  }
}

TEST(EvictionTest, S3FifoEvictsOneHitWondersFirstAndKeepsHitBlocks) {
  PolicyKnobs k;
  k.s3fifo_small_fraction = 0.5;
  auto p = Make("s3fifo", k);
  for (uint64_t id = 1; id <= 4; ++id) p->OnInsert(Leaf(id, 0));
  p->OnAccess(Leaf(2, 0));  // 2 is hit while in the small FIFO
  std::vector<BlockMeta> c = {Leaf(1, 0), Leaf(2, 0), Leaf(3, 0), Leaf(4, 0)};
  p->Order(c, 0);
  // Small holds all: its blocks in FIFO order, 2 (to be moved to main) last.
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{1, 3, 4, 2}));
  p->OnRemove(1);           // leaves a ghost; 2, behind it, is not passed over
  p->OnInsert(Leaf(1, 0));  // a returning ghost goes straight to main
  std::vector<BlockMeta> d = {Leaf(1, 0), Leaf(2, 0), Leaf(3, 0)};
  p->Order(d, 0);
  // small = {2, 3, 4} is over its half: 3 first, then main (1), then 2.
  EXPECT_EQ(Ids(d), (std::vector<uint64_t>{3, 1, 2}));
  p->OnRemove(3);  // passes 2 over: it moves to main
  std::vector<BlockMeta> e = {Leaf(1, 0), Leaf(2, 0), Leaf(4, 0)};
  p->Order(e, 0);
  // small = {4}, main = {1, 2}: main first, in FIFO order.
  EXPECT_EQ(Ids(e), (std::vector<uint64_t>{1, 2, 4}));
  // 1 is hit twice: evicting from main passes it over twice; one eviction
  // (of 2) passes it once, to main's tail with one count left.
  p->OnAccess(Leaf(1, 0));
  p->OnAccess(Leaf(1, 0));
  p->Order(e, 0);
  EXPECT_EQ(Ids(e), (std::vector<uint64_t>{2, 1, 4}));
  p->OnRemove(2);
  std::vector<BlockMeta> f = {Leaf(1, 0), Leaf(4, 0)};
  p->Order(f, 0);
  EXPECT_EQ(Ids(f), (std::vector<uint64_t>{1, 4}));
}

// Ranking is not evicting, nor is a Remove: a main block hit three times
// keeps its count over any number of rankings and of Removes of blocks no
// ranking offered. Each ranking used to lower the count of every hit
// candidate, so after three the block was first to go among newer ones.
TEST(EvictionTest, S3FifoRankingsDoNotUseUpAHitBlocksCount) {
  PolicyKnobs k;
  k.s3fifo_small_fraction = 0.1;
  auto p = Make("s3fifo", k);
  auto to_main = [&](uint64_t id) {  // in, out (a ghost), and back: main
    p->OnInsert(Leaf(id, 0));
    p->OnRemove(id);
    p->OnInsert(Leaf(id, 0));
  };
  for (uint64_t id = 1; id <= 3; ++id) to_main(id);
  for (int i = 0; i < 3; ++i) p->OnAccess(Leaf(1, 0));
  std::vector<BlockMeta> c = {Leaf(1, 0), Leaf(2, 0), Leaf(3, 0)};
  for (int i = 0; i < 5; ++i) {
    p->Order(c, 0);
    EXPECT_EQ(Ids(c), (std::vector<uint64_t>{2, 3, 1})) << i;
  }
  // Removes of main blocks no ranking offered are not evictions: they pass
  // nothing over.
  for (uint64_t id = 4; id <= 6; ++id) {
    to_main(id);
    p->OnRemove(id);
  }
  to_main(7);
  to_main(8);
  std::vector<BlockMeta> d = {Leaf(1, 0), Leaf(7, 0), Leaf(8, 0)};
  p->Order(d, 0);
  EXPECT_EQ(Ids(d), (std::vector<uint64_t>{7, 8, 1}));
}

// A block ghosted twice keeps its newer ghost record when the queue's entry
// for the first ghosting comes up: that entry used to erase the record, and
// the block came back into the small FIFO. The ghost queue (bound 16 for an
// empty tier) holds at most 32 entries, so 31 more stale ones push x's
// first entry out while its second, and its record, stay.
TEST(EvictionTest, S3FifoAStaleGhostEntryForgetsNothing) {
  PolicyKnobs k;
  k.s3fifo_small_fraction = 0.1;
  auto p = Make("s3fifo", k);
  const uint64_t x = 100;
  p->OnInsert(Leaf(x, 0));
  p->OnRemove(x);                          // a ghost
  p->OnInsert(Leaf(x, 0));                 // back, to main
  p->OnRemove(x);                          // from main: no ghost
  p->OnInsert(Leaf(x, 0));                 // small again
  p->OnRemove(x);                          // a ghost again
  for (uint64_t id = 1; id <= 31; ++id) {  // each leaves one stale queue entry
    p->OnInsert(Leaf(id, 0));
    p->OnRemove(id);
    p->OnInsert(Leaf(id, 0));
    p->OnRemove(id);
  }
  p->OnInsert(Leaf(x, 0));  // a returning ghost: main
  p->OnInsert(Leaf(200, 0));
  std::vector<BlockMeta> c = {Leaf(x, 0), Leaf(200, 0)};
  p->Order(c, 0);
  // Small ({200}) is over its tenth and goes first; x is in main.
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{200, x}));
}

// One window request: its blocks' ids and FLOPs, one byte each.
TuneRequest Request(std::vector<std::pair<uint64_t, double>> blocks) {
  TuneRequest r;
  for (auto [id, flops] : blocks) {
    BlockMeta b;
    b.id = id;
    b.bytes = 1;
    b.flops = flops;
    r.blocks.push_back(b);
  }
  return r;
}

// A window where one deep, expensive chain is reused across a stream of
// cheap one-off requests: recency alone evicts the chain; weighting FLOPs
// keeps it.
std::vector<TuneRequest> ConstructedWindow() {
  std::vector<TuneRequest> w;
  auto chain = Request;
  for (int round = 0; round < 4; ++round) {
    w.push_back(chain({{1, 10}, {2, 30}, {3, 50}}));
    for (uint64_t j = 0; j < 3; ++j) w.push_back(chain({{100 + 10 * round + j, 1}}));
  }
  return w;
}

TEST(AlphaTuningTest, PicksTheAlphaThatSavesMoreFlops) {
  const std::vector<TuneRequest> w = ConstructedWindow();
  const double at0 = ReplayFlopsSaved(w, 4, 0.0);
  const double at4 = ReplayFlopsSaved(w, 4, 4.0);
  EXPECT_EQ(at0, 3 * 10.0);  // the one-offs push all but the chain's root out
  EXPECT_EQ(at4, 3 * 90.0);  // the chain hits in rounds 2..4
  const double grid[] = {0.0, 4.0};
  EXPECT_EQ(TuneAlpha(w, 4, grid), 4.0);
  const double only_zero[] = {0.0};
  EXPECT_EQ(TuneAlpha(w, 4, only_zero), 0.0);
}

// Lookups need not start at a chain's root (an engine holding the prefix
// asks about the rest) and may name a key twice. The replay must stay a
// consistent cache, not reparent blocks it holds (which ended the mover
// thread with an exception).
TEST(AlphaTuningTest, LookupsNotFromTheRootOrRepeatingAKeyReplaySafely) {
  const std::vector<TuneRequest> suffix = {
      Request({{11, 1}, {12, 1}}), Request({{10, 1}, {11, 1}, {12, 1}}),
      Request({{20, 1}}),          Request({{21, 1}}),
      Request({{22, 1}}),          Request({{23, 1}})};
  double saved = -1;
  EXPECT_NO_THROW(saved = ReplayFlopsSaved(suffix, 4, 0.0));
  EXPECT_EQ(saved, 0.0);  // no request finds its first block cached
  const std::vector<TuneRequest> repeat = {Request({{5, 1}, {5, 1}}), Request({{20, 1}}),
                                           Request({{21, 1}}), Request({{22, 1}})};
  EXPECT_NO_THROW(saved = ReplayFlopsSaved(repeat, 2, 0.0));
  EXPECT_EQ(saved, 0.0);
  // Hits still count: the suffix is found again, then the block before it.
  const std::vector<TuneRequest> again = {Request({{11, 1}, {12, 2}}),
                                          Request({{10, 4}, {11, 1}, {12, 2}}),
                                          Request({{11, 1}, {12, 2}}), Request({{10, 4}})};
  EXPECT_EQ(ReplayFlopsSaved(again, 4, 0.0), 3.0 + 4.0);
}

}  // namespace
}  // namespace kvtier
