// The hub with lower tiers: demotion by watermark, loads that stage blocks
// back from below, and leaf-first order across tiers.
#include <gtest/gtest.h>

#include <thread>

#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

class RuntimeTiersTest : public ::testing::Test {
 protected:
  void Open(uint64_t hub_blocks, std::vector<uint64_t> lower_blocks) {
    setup_ = MakeEngine(64);
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, hub_blocks);
    o.tiers[0].watermarks = {.high = 0.75, .low = 0.5};
    for (size_t i = 0; i < lower_blocks.size(); ++i) {
      o.tiers.push_back(LowerHostTier("lower" + std::to_string(i + 1), bb, lower_blocks[i]));
    }
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  void Save(const std::vector<uint64_t>& ids) {
    auto keys = ChainKeys(ids);
    sim_->Prefill(keys, 0);
    ASSERT_TRUE(sim_->SaveFrom(keys, 0, 0).status().ok());
  }
  LookupResult Find(const std::vector<uint64_t>& ids) {
    auto r = rt_->Lookup(kTestNs, ChainKeys(ids));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : LookupResult{};
  }

  EngineSetup setup_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

TEST_F(RuntimeTiersTest, DemotedBlocksLoadBackByteExact) {
  Open(8, {32});
  Save({1, 2, 3, 4});
  Save({10, 11, 12, 13});
  ASSERT_EQ(*rt_->TEST_RunMoverOnce(), 4u);  // 8 used > 6: down to 4
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[0].blocks, 4u);
  EXPECT_EQ(st.tiers[1].blocks, 4u);
  EXPECT_EQ(st.tiers[0].demoted_blocks, 4u);
  EXPECT_EQ(st.tiers[1].admitted_blocks, 4u) << "admission 'always' takes every offer";
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 0u);
  // The first chain was least recent; its leaves went first, then parents.
  LookupResult a = Find({1, 2, 3, 4});
  EXPECT_EQ(a.hit_blocks, 4u);
  EXPECT_EQ(a.tier, (std::vector<uint8_t>{1, 1, 1, 1}));
  EXPECT_EQ(Find({10, 11, 12, 13}).tier, (std::vector<uint8_t>{0, 0, 0, 0}));

  sim_->Scrub(0, 64);
  auto keys = ChainKeys({1, 2, 3, 4});
  Completion c = sim_->Load(keys, 20);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(sim_->Holds(20 + i, keys[i]));
  st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].hit_blocks, 4u);
  EXPECT_EQ(st.tiers[1].bytes_read, 4 * setup_.layout.BlockBytes());
  EXPECT_EQ(Find({1, 2, 3, 4}).tier, (std::vector<uint8_t>{0, 0, 0, 0})) << "promoted on load";
}

TEST_F(RuntimeTiersTest, ChildrenLeaveBeforeParentsAcrossThreeTiers) {
  Open(4, {4, 4});
  Save({1, 2, 3, 4});
  Save({5, 6, 7, 8});  // hub full: chain 1 moves down, leaves first
  Save({9, 10, 11, 12});
  Save({13, 14, 15, 16});
  // Leaf-first means a chain is never cut in the middle: every stored block's
  // parent is stored, and lookups see whole prefixes.
  for (uint64_t base : {1, 5, 9, 13}) {
    LookupResult r = Find({base, base + 1, base + 2, base + 3});
    for (size_t i = 1; i < r.tier.size(); ++i) EXPECT_LE(r.tier[i - 1], r.tier[i]) << base;
  }
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[0].blocks + st.tiers[1].blocks + st.tiers[2].blocks, 12u)
      << "12 of 16 fit; the oldest chain dropped out of the last tier";
  EXPECT_EQ(Find({1, 2, 3, 4}).hit_blocks, 0u);
  EXPECT_EQ(Find({13, 14, 15, 16}).hit_blocks, 4u);
}

// One block of room at a time, the chain leaves the full hub from its leaf
// up: a save of a new root takes the least recent leaf, which is the
// chain's deepest block still in the hub.
TEST_F(RuntimeTiersTest, OneBlockOfRoomAtATimeTheDeepestBlockLeavesFirst) {
  Open(4, {4, 4});
  Save({1, 2, 3, 4});
  const std::vector<std::vector<uint8_t>> after = {
      {0, 0, 0, 1}, {0, 0, 1, 1}, {0, 1, 1, 1}, {1, 1, 1, 1}};
  for (uint64_t i = 0; i < after.size(); ++i) {
    Save({5 + i});
    EXPECT_EQ(Find({1, 2, 3, 4}).tier, after[i]) << "after saving " << 5 + i;
    EXPECT_EQ(Find({5 + i}).tier, std::vector<uint8_t>{0});
  }
}

TEST_F(RuntimeTiersTest, MoverThreadKeepsTheHubUnderItsHighMark) {
  setup_ = MakeEngine(64);
  const uint64_t bb = setup_.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 16, /*mover_thread=*/true);
  o.tiers[0].watermarks = {.high = 0.5, .low = 0.25};
  o.tiers.push_back(LowerHostTier("lower", bb, 64));
  auto rt = Runtime::Open(o, setup_.engine);
  ASSERT_TRUE(rt.ok());
  rt_ = std::move(rt).value();
  sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  for (uint64_t i = 0; i < 12; ++i) Save({200 + i});
  // The thread reacts to the crossing; wait for it (bounded).
  for (int i = 0; i < 400 && rt_->Stats().tiers[0].blocks > 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  RuntimeStats st = rt_->Stats();
  EXPECT_LE(st.tiers[0].blocks, 8u);
  EXPECT_EQ(st.tiers[0].blocks + st.tiers[1].blocks, 12u) << "demotion moves, it does not copy";
  for (uint64_t i = 0; i < 12; ++i) EXPECT_EQ(Find({200 + i}).hit_blocks, 1u) << i;
}

}  // namespace
}  // namespace kvtier::testing
