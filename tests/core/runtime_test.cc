// Runtime behaviour with the host hub alone: save/load round trips, the
// prefix rule, exact hit counts, eviction and pins, removal, shutdown.
#include <gtest/gtest.h>

#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"

namespace kvtier::testing {
namespace {

class RuntimeTest : public ::testing::Test {
 protected:
  void Open(uint64_t hub_blocks, KvLayoutKind kind = KvLayoutKind::kVllmNhd) {
    setup_ = MakeEngine(64, kind);
    ASSERT_TRUE(setup_.engine);
    auto rt = Runtime::Open(MakeOptions(setup_.layout.BlockBytes(), hub_blocks), setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  size_t Hits(const std::vector<BlockKey>& keys) {
    auto r = rt_->Lookup(kTestNs, keys);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->hit_blocks : 0;
  }
  // One engine step: lookup, load the hits into blocks 0.., prefill and save
  // the rest. Returns the hit count; checks every loaded byte.
  size_t Step(const std::vector<uint64_t>& ids) {
    auto keys = ChainKeys(ids);
    auto pin = rt_->LookupAndPin(kTestNs, keys);
    EXPECT_TRUE(pin.ok());
    size_t hits = pin->hit_blocks();
    sim_->Scrub(0, static_cast<uint32_t>(keys.size()));
    std::vector<BlockKey> prefix(keys.begin(), keys.begin() + hits);
    Completion c = sim_->Load(prefix, 0);
    EXPECT_EQ(c.ok_count(), hits) << c.status().ToString();
    for (size_t i = 0; i < hits; ++i) EXPECT_TRUE(sim_->Holds(static_cast<uint32_t>(i), keys[i]));
    std::vector<BlockKey> rest(keys.begin() + hits, keys.end());
    sim_->Prefill(rest, static_cast<uint32_t>(hits));
    Completion s = sim_->SaveFrom(keys, hits, 0);
    EXPECT_TRUE(s.status().ok()) << s.status().ToString();
    return hits;
  }

  EngineSetup setup_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

TEST_F(RuntimeTest, SaveThenLoadIntoOtherBlocksIsByteExact) {
  for (auto kind : {KvLayoutKind::kVllmNhd, KvLayoutKind::kVllmHnd, KvLayoutKind::kCrossLayer}) {
    Open(16, kind);
    auto keys = ChainKeys({1, 2, 3});
    sim_->Prefill(keys, 10);
    Completion s = sim_->SaveFrom(keys, 0, 10);
    ASSERT_TRUE(s.status().ok()) << s.status().ToString();
    EXPECT_EQ(s.bytes(0), setup_.layout.BlockBytes());
    sim_->Scrub(0, 64);
    Completion l = sim_->Load(keys, 40);
    ASSERT_TRUE(l.status().ok()) << l.status().ToString();
    for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(sim_->Holds(40 + i, keys[i])) << i;
    EXPECT_FALSE(sim_->Holds(10, keys[0])) << "source blocks were scrubbed";
    EXPECT_EQ(l.layers_done(), setup_.layout.num_layers);
    rt_.reset();
  }
}

TEST_F(RuntimeTest, LookupStopsAtTheFirstMiss) {
  Open(16);
  auto keys = ChainKeys({1, 2, 3});
  sim_->Prefill(keys, 0);
  ASSERT_TRUE(sim_->SaveFrom(keys, 0, 0).status().ok());
  EXPECT_EQ(Hits(ChainKeys({1, 2, 3, 4})), 3u);
  EXPECT_EQ(Hits(ChainKeys({1, 2})), 2u);
  EXPECT_EQ(Hits(ChainKeys({1, 9, 3})), 1u) << "3 after 9 is a different block";
  EXPECT_EQ(Hits(ChainKeys({9})), 0u);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.lookups, 4u);
  EXPECT_EQ(st.lookup_hit_blocks, 6u);
  EXPECT_EQ(st.tiers[0].blocks, 3u);
}

TEST_F(RuntimeTest, ExactHitsOnAHandBuiltTrace) {
  Open(64);
  // Request -> expected leading hits with an unbounded hub.
  EXPECT_EQ(Step({1, 2, 3}), 0u);
  EXPECT_EQ(Step({1, 2, 4}), 2u);
  EXPECT_EQ(Step({1, 2, 3, 5}), 3u);
  EXPECT_EQ(Step({6}), 0u);
  EXPECT_EQ(Step({1, 2, 4, 7}), 3u);
  EXPECT_EQ(Step({6, 8}), 1u);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.loaded_blocks, 9u);
  EXPECT_EQ(st.saved_blocks, 8u);  // 1 2 3 4 5 6 7 8
  EXPECT_EQ(st.tiers[0].hit_blocks, 9u);
  EXPECT_EQ(st.load_failures, 0u);
}

TEST_F(RuntimeTest, DuplicatesAreSkippedAndAMissingParentIsRefused) {
  Open(16);
  auto keys = ChainKeys({1, 2});
  sim_->Prefill(keys, 0);
  ASSERT_TRUE(sim_->SaveFrom(keys, 0, 0).status().ok());
  ASSERT_TRUE(sim_->SaveFrom(keys, 0, 0).status().ok());
  EXPECT_EQ(rt_->Stats().save_duplicates, 2u);
  auto orphan = ChainKeys({5, 6, 7});
  Completion c = sim_->SaveFrom(orphan, 1, 0);  // parent 5 was never saved
  ASSERT_TRUE(c.Poll());
  EXPECT_EQ(c.result(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.result(1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Hits(orphan), 0u);
}

TEST_F(RuntimeTest, FullHubEvictsTheLeastRecentLeaf) {
  Open(6);
  EXPECT_EQ(Step({1, 2, 3}), 0u);
  EXPECT_EQ(Step({4, 5, 6}), 0u);
  EXPECT_EQ(Step({7}), 0u);  // needs one slot: block 3, the oldest leaf, goes
  EXPECT_EQ(Hits(ChainKeys({1, 2, 3})), 2u);
  EXPECT_EQ(Hits(ChainKeys({4, 5, 6})), 3u);
  EXPECT_EQ(Hits(ChainKeys({7})), 1u);
  EXPECT_EQ(rt_->Stats().tiers[0].evicted_blocks, 1u);
}

TEST_F(RuntimeTest, PinnedBlocksSurviveAndAFullyPinnedHubRefusesSaves) {
  Open(4);
  EXPECT_EQ(Step({1, 2}), 0u);
  EXPECT_EQ(Step({3, 4}), 0u);
  auto a = rt_->LookupAndPin(kTestNs, ChainKeys({1, 2}));
  auto b = rt_->LookupAndPin(kTestNs, ChainKeys({3, 4}));
  ASSERT_EQ(a->hit_blocks(), 2u);
  auto keys = ChainKeys({5});
  sim_->Prefill(keys, 0);
  Completion c = sim_->SaveFrom(keys, 0, 0);
  EXPECT_EQ(c.result(0).code(), StatusCode::kResourceExhausted);
  PinnedPrefix moved = std::move(b).value();
  EXPECT_EQ(b->hit_blocks(), 0u) << "a moved-from pin still reports hits it no longer holds";
  EXPECT_EQ(moved.hit_blocks(), 2u);
  moved = PinnedPrefix();  // unpin 3, 4
  c = sim_->SaveFrom(keys, 0, 0);
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  EXPECT_EQ(Hits(ChainKeys({1, 2})), 2u) << "pinned chain kept";
  EXPECT_EQ(Hits(ChainKeys({3, 4})), 1u) << "leaf 4 evicted";
}

TEST_F(RuntimeTest, MoverBringsTheHubDownToTheLowWatermark) {
  setup_ = MakeEngine(64);
  RuntimeOptions o = MakeOptions(setup_.layout.BlockBytes(), 10);
  o.tiers[0].watermarks = {.high = 0.8, .low = 0.5};
  auto rt = Runtime::Open(o, setup_.engine);
  ASSERT_TRUE(rt.ok());
  rt_ = std::move(rt).value();
  sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  for (uint64_t i = 0; i < 10; ++i) Step({100 + i});
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 10u);
  auto moved = rt_->TEST_RunMoverOnce();
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(*moved, 5u);
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 5u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(Hits(ChainKeys({100 + i})), 0u) << "oldest go first";
  for (uint64_t i = 5; i < 10; ++i) EXPECT_EQ(Hits(ChainKeys({100 + i})), 1u);
  EXPECT_EQ(*rt_->TEST_RunMoverOnce(), 0u) << "below the high mark nothing moves";
}

TEST_F(RuntimeTest, LoadReportsMissesPerBlock) {
  Open(8);
  Step({1, 2});
  auto keys = ChainKeys({1, 2, 3});
  Completion c = sim_->Load(keys, 0);
  EXPECT_TRUE(c.result(0).ok());
  EXPECT_TRUE(c.result(1).ok());
  EXPECT_EQ(c.result(2).code(), StatusCode::kNotFound);
  EXPECT_EQ(rt_->Stats().load_failures, 1u);
}

TEST_F(RuntimeTest, LayerCallbacksRunInOrder) {
  Open(8);
  Step({1, 2});
  auto keys = ChainKeys({1, 2});
  std::vector<uint32_t> layers;
  std::vector<uint32_t> blocks = {5, 6};
  Completion c = rt_->Load(kTestNs, keys, blocks, std::chrono::seconds(5),
                           [&](uint32_t l) { layers.push_back(l); });
  ASSERT_TRUE(c.Wait().ok());
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1}));
}

TEST_F(RuntimeTest, BadArgumentsAreRefused) {
  Open(8);
  auto keys = ChainKeys({1, 2});
  std::vector<uint32_t> one = {0};
  EXPECT_EQ(rt_->Save(kTestNs, std::nullopt, keys, one).status().code(),
            StatusCode::kInvalidArgument);
  std::vector<uint32_t> far = {0, 64};
  Completion c = rt_->Save(kTestNs, std::nullopt, keys, far);
  EXPECT_NE(c.status().message().find("engine block 64 is out of range"), std::string_view::npos);
  std::vector<uint32_t> twice = {3, 3};
  Completion dup = rt_->Load(kTestNs, keys, twice, std::chrono::seconds(1));
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("engine block 3 appears twice, for keys 0 and 1"),
            std::string_view::npos)
      << dup.status().ToString();
}

TEST_F(RuntimeTest, RemoveKeepsThePrefixRule) {
  Open(8);
  Step({1, 2, 3});
  EXPECT_EQ(rt_->Remove(kTestNs, ChainKeys({1, 2})).code(), StatusCode::kInvalidArgument)
      << "2 still has child 3";
  ASSERT_TRUE(rt_->Remove(kTestNs, ChainKeys({1, 2, 3})).ok());
  EXPECT_EQ(Hits(ChainKeys({1})), 0u);
  EXPECT_EQ(rt_->Stats().tiers[0].used_bytes, 0u);
  EXPECT_TRUE(rt_->Remove(kTestNs, ChainKeys({42})).ok()) << "absent keys are ignored";
}

TEST_F(RuntimeTest, ShutdownFinishesQueuedWorkThenRefuses) {
  Open(32);
  std::vector<Completion> saves;
  for (uint64_t i = 0; i < 20; ++i) {
    auto keys = ChainKeys({500 + i});
    sim_->Prefill(keys, static_cast<uint32_t>(i));
    std::vector<uint32_t> b = {static_cast<uint32_t>(i)};
    saves.push_back(rt_->Save(kTestNs, std::nullopt, keys, b));
  }
  rt_->Shutdown();
  for (auto& c : saves) {
    ASSERT_TRUE(c.Poll());
    EXPECT_TRUE(c.status().ok()) << c.status().ToString();
  }
  EXPECT_EQ(rt_->Lookup(kTestNs, ChainKeys({500})).status().code(), StatusCode::kUnavailable);
  // Nothing can be loaded now: an engine must not free pages on its word.
  EXPECT_FALSE(rt_->IsSaved(kTestNs, ChainKeys({500})));
  std::vector<uint32_t> b = {0};
  EXPECT_EQ(rt_->Save(kTestNs, std::nullopt, ChainKeys({1}), b).status().code(),
            StatusCode::kUnavailable);
}

TEST(RuntimeOpen, RefusesMismatchedOrUnsupportedSetups) {
  EngineSetup s = MakeEngine(8);
  RuntimeOptions o = MakeOptions(s.layout.BlockBytes() * 2, 8);
  auto r = Runtime::Open(o, s.engine);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("block is 4096 bytes"), std::string_view::npos)
      << r.status().ToString();
  o = MakeOptions(s.layout.BlockBytes(), 8);
  TierOptions broken = LowerHostTier("lower", s.layout.BlockBytes(), 8);
  broken.capacity_bytes = 100;  // holds no block: the lower tier fails to open
  o.tiers.push_back(broken);
  r = Runtime::Open(o, s.engine);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tier 'lower'"), std::string_view::npos)
      << r.status().ToString();
  EXPECT_FALSE(Runtime::Open(MakeOptions(4096, 8), nullptr).ok());
}

}  // namespace
}  // namespace kvtier::testing
