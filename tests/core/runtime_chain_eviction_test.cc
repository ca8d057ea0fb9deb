// Eviction past the ancestors of long chains: a chain extended by a later
// save, or staged back into the hub root first, leaves its ancestors at the
// least recent end of the hub, with children in it. Saves and the mover must
// still find the leaves behind them. So must a chain adopted root first
// from a persistent tier after a restart.
#include <gtest/gtest.h>

#include <string>

#include "tests/core/runtime_test_util.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {
namespace {

std::vector<uint64_t> Ids(uint64_t first, uint64_t n) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < n; ++i) ids.push_back(first + i);
  return ids;
}

class ChainEvictionTest : public ::testing::Test {
 protected:
  ChainEvictionTest() : setup_(MakeEngine(1024)), bb_(setup_.layout.BlockBytes()) {}

  void Open(const RuntimeOptions& o) {
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  // Saves keys[from..] under keys[from - 1] (none when from is 0).
  Completion SaveFrom(const std::vector<BlockKey>& keys, size_t from = 0) {
    sim_->Prefill(keys, 0);
    return sim_->SaveFrom(keys, from, 0);
  }
  size_t Hits(const std::vector<BlockKey>& keys) {
    auto r = rt_->Lookup(kTestNs, keys);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->hit_blocks : 0;
  }
  uint64_t HubBlocks() { return rt_->Stats().tiers[0].blocks; }
  size_t Move() {
    auto moved = rt_->TEST_RunMoverOnce();
    EXPECT_TRUE(moved.ok());
    return moved.ok() ? *moved : 0;
  }

  EngineSetup setup_;
  const uint64_t bb_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

// A 270-block chain extended by one block, then one unrelated block, fill a
// hub of 272: the 270 ancestors, each with its child in the hub, sit at its
// least recent end, more of them than an eviction pass examines. The next
// save still evicts the chain's leaf, under every eviction policy.
TEST_F(ChainEvictionTest, SaveIntoAFullHubEvictsPastAnExtendedChain) {
  for (const char* policy : {"lru", "s3fifo", "flop_aware", "reuse"}) {
    SCOPED_TRACE(policy);
    RuntimeOptions o = MakeOptions(bb_, 272);
    o.tiers[0].watermarks = {.high = 1.0, .low = 0.5};
    o.tiers[0].eviction = policy;
    Open(o);
    const auto chain = ChainKeys(Ids(1, 271));
    ASSERT_TRUE(SaveFrom({chain.begin(), chain.end() - 1}).status().ok());
    ASSERT_TRUE(SaveFrom(chain, 270).status().ok());  // parent: block 270
    ASSERT_TRUE(SaveFrom(ChainKeys({5000})).status().ok());
    ASSERT_EQ(HubBlocks(), 272u);
    Completion c = SaveFrom(ChainKeys({6000}));
    EXPECT_TRUE(c.status().ok()) << c.status().ToString();
    EXPECT_TRUE(rt_->IsSaved(kTestNs, ChainKeys({6000})));
    EXPECT_TRUE(rt_->IsSaved(kTestNs, ChainKeys({5000})));
    EXPECT_EQ(Hits(chain), 270u) << "the chain's leaf made the room";
    rt_.reset();
  }
}

// The same in the mover: a 600-block chain extended by one block, and a
// 40-block chain, take a hub of 700 past its high watermark (630). One pass
// demotes down to the low watermark (350), from the least recent leaf up the
// long chain: its ancestors are more than a batch's scan.
TEST_F(ChainEvictionTest, MoverReachesTheLowWatermarkPastAnExtendedChain) {
  RuntimeOptions o = MakeOptions(bb_, 700);
  o.tiers[0].watermarks = {.high = 0.9, .low = 0.5};
  Open(o);
  const auto chain = ChainKeys(Ids(1, 601));
  ASSERT_TRUE(SaveFrom({chain.begin(), chain.end() - 1}).status().ok());
  ASSERT_TRUE(SaveFrom(chain, 600).status().ok());
  const auto other = ChainKeys(Ids(5000, 40));
  ASSERT_TRUE(SaveFrom(other).status().ok());
  ASSERT_EQ(HubBlocks(), 641u);
  EXPECT_EQ(Move(), 291u);
  EXPECT_EQ(HubBlocks(), 350u);
  EXPECT_EQ(Hits(chain), 310u);
  EXPECT_EQ(Hits(other), 40u);
}

// A 300-block chain demoted to the lower tier and loaded back: the hub
// stages it root first, so the root is its least recent block. With one
// block a batch, the mover still drops the whole chain from the hub again
// (the lower tier keeps it), and a load still returns every byte.
TEST_F(ChainEvictionTest, MoverEvictsAChainStagedBackRootFirst) {
  RuntimeOptions o = MakeOptions(bb_, 3000);
  o.tiers[0].watermarks = {.high = 0.05, .low = 0.0001};
  o.tiers.push_back(LowerHostTier("ssd", bb_, 400));
  o.mover.batch_blocks = 1;
  Open(o);
  const auto chain = ChainKeys(Ids(1, 300));
  ASSERT_TRUE(SaveFrom(chain).status().ok());
  ASSERT_EQ(Move(), 300u);
  ASSERT_EQ(HubBlocks(), 0u);
  sim_->Scrub(0, 300);
  ASSERT_TRUE(sim_->Load(chain, 0).status().ok());
  ASSERT_EQ(HubBlocks(), 300u);
  EXPECT_EQ(Move(), 300u);
  EXPECT_EQ(HubBlocks(), 0u);
  auto r = rt_->Lookup(kTestNs, chain);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tier, std::vector<uint8_t>(300, 1));
  sim_->Scrub(0, 300);
  ASSERT_TRUE(sim_->Load(chain, 0).status().ok());
  for (uint32_t i = 0; i < 300; ++i) ASSERT_TRUE(sim_->Holds(i, chain[i])) << i;
}

// After a restart the runtime adopts the chain a persistent disk kept, root
// first: there too the root is the chain's least recent block. With one
// block a batch, the mover still takes the disk down to its low watermark.
TEST_F(ChainEvictionTest, MoverEvictsAChainAdoptedAfterARestart) {
  auto made = CreateTier(LowerHostTier("disk", bb_, 310), TierContext{bb_});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::shared_ptr<Tier> disk(std::move(made).value());
  auto options = [&](WatermarkOptions disk_watermarks) {
    RuntimeOptions o = MakeOptions(bb_, 3000);
    o.tiers[0].watermarks = {.high = 0.001, .low = 0.0001};  // demotes every block
    o.tiers.push_back(LowerHostTier("disk", bb_, 310));
    o.tiers[1].watermarks = disk_watermarks;
    o.mover.batch_blocks = 1;
    o.tier_factory = [disk](const TierOptions&,
                            const TierContext&) -> Result<std::unique_ptr<Tier>> {
      return NewTierView(disk, TierCapabilities{.persistent = true, .local_index = true});
    };
    return o;
  };
  const auto chain = ChainKeys(Ids(1, 300));
  Open(options({.high = 1.0, .low = 0.5}));
  ASSERT_TRUE(SaveFrom(chain).status().ok());
  ASSERT_EQ(Move(), 300u);
  ASSERT_EQ(disk->Usage().blocks, 300u);
  sim_.reset();
  rt_.reset();  // the restart: the next runtime's index starts empty
  Open(options({.high = 0.9, .low = 0.5}));
  ASSERT_EQ(Hits(chain), 300u);
  ASSERT_EQ(rt_->Stats().adopted_blocks, 300u);
  ASSERT_TRUE(SaveFrom(ChainKeys(Ids(5000, 10))).status().ok());
  // 10 blocks demoted from the hub, then the disk (310 of 310) down to 155,
  // from the adopted chain's leaf up.
  EXPECT_EQ(Move(), 165u);
  EXPECT_EQ(disk->Usage().blocks, 155u);
  EXPECT_EQ(Hits(chain), 145u);
  EXPECT_EQ(Hits(ChainKeys(Ids(5000, 10))), 10u);
  sim_.reset();
  rt_.reset();
  disk->Shutdown();
}

// A load of P, C ends at C. A flop_aware hub refreshes only C, the deepest
// hit: once C is gone P is as old as its save, and leaves before D, loaded
// between that save and the load. An LRU hub refreshes P too, and keeps it.
TEST_F(ChainEvictionTest, AFlopAwareHubRefreshesOnlyTheDeepestHitOfALoad) {
  for (const char* policy : {"lru", "flop_aware"}) {
    RuntimeOptions o = MakeOptions(bb_, 4);
    o.tiers[0].eviction = policy;
    o.tiers[0].watermarks = {.high = 1.0, .low = 0.75};  // room for one block at a time
    o.tiers[0].policy.flop_alpha = 0;                    // recency alone
    o.tiers[0].policy.alpha_tune_every = 0;
    Open(o);
    const auto pc = ChainKeys({1, 2});
    const auto d = ChainKeys({3});
    ASSERT_TRUE(SaveFrom(pc).status().ok());
    ASSERT_TRUE(SaveFrom(d).status().ok());
    ASSERT_TRUE(sim_->Load(d, 10).result(0).ok());
    Completion both = sim_->Load(pc, 11);
    ASSERT_TRUE(both.result(0).ok() && both.result(1).ok());
    ASSERT_TRUE(rt_->Remove(kTestNs, std::span(pc).subspan(1)).ok());
    ASSERT_TRUE(SaveFrom(ChainKeys({4, 5})).status().ok());  // the hub: P, D, E, F
    ASSERT_TRUE(SaveFrom(ChainKeys({6})).status().ok());     // one of P and D leaves
    const bool deepest_only = std::string(policy) == "flop_aware";
    EXPECT_EQ(Hits(std::vector<BlockKey>{pc[0]}), deepest_only ? 0u : 1u) << policy;
    EXPECT_EQ(Hits(d), deepest_only ? 1u : 0u) << policy;
    EXPECT_EQ(HubBlocks(), 4u) << policy;
  }
}

}  // namespace
}  // namespace kvtier::testing
