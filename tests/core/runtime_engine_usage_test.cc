// The engine's GPU pool through the Runtime: usage reports, admission
// against the watermark, preemption proposals ordered cheapest to restore
// first and covering the blocks asked for, and the save-before-free check.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>

#include "core/runtime_impl.h"
#include "kvtier/config.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

class EngineUsageTest : public ::testing::Test {
 protected:
  void Open(double gpu_watermark) {
    setup_ = MakeEngine(64);
    ASSERT_TRUE(setup_.engine);
    RuntimeOptions o = MakeOptions(setup_.layout.BlockBytes(), 32);
    o.gpu_watermark = gpu_watermark;
    auto rt = Runtime::Open(std::move(o), setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  // Saves keys[0..n) from engine blocks first_block.. and checks it worked.
  void SavePrefix(const std::vector<BlockKey>& keys, size_t n, uint32_t first_block) {
    std::vector<BlockKey> prefix(keys.begin(), keys.begin() + n);
    sim_->Prefill(prefix, first_block);
    Completion c = sim_->SaveFrom(prefix, 0, first_block);
    ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  }
  std::vector<uint64_t> Ids(const std::vector<PreemptionVictim>& v) {
    std::vector<uint64_t> ids;
    for (const PreemptionVictim& p : v) ids.push_back(p.request_id);
    return ids;
  }

  EngineSetup setup_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

TEST_F(EngineUsageTest, BadUsageReportsAndRequestsAreRefused) {
  Open(0.01);
  Status s = rt_->ReportEngineUsage(5, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "engine usage: free_blocks 5 exceeds total_blocks 4");
  s = rt_->ReportEngineUsage(0, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "engine usage: total_blocks is 0; expected the pool size");
  EXPECT_TRUE(rt_->ReportEngineUsage(4, 4).ok());
  EXPECT_TRUE(rt_->ReportEngineUsage(0, 4).ok());

  auto keys = ChainKeys({1, 2, 3});
  s = rt_->TrackRequest(7, kTestNs, keys, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "track request 7: 3 keys but only 2 engine blocks");
  EXPECT_TRUE(rt_->TrackRequest(7, kTestNs, keys, 3).ok());
  rt_->UntrackRequest(7);
  rt_->UntrackRequest(12345);  // unknown: ignored
}

TEST_F(EngineUsageTest, WatermarkOptionIsValidated) {
  auto engine = MakeEngine(64);
  for (double w : {1.0, -0.5, std::nan("")}) {
    RuntimeOptions o = MakeOptions(engine.layout.BlockBytes(), 32);
    o.gpu_watermark = w;
    auto rt = Runtime::Open(std::move(o), engine.engine);
    ASSERT_FALSE(rt.ok()) << w;
    EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(rt.status().message().find("expected a fraction in [0, 1)"), std::string::npos)
        << rt.status().message();
  }
  RuntimeOptions o = MakeOptions(engine.layout.BlockBytes(), 32);
  o.gpu_watermark = 1.0;
  EXPECT_EQ(o.Validate().message(), "gpu_watermark is 1.000000; expected a fraction in [0, 1)");
  o.gpu_watermark = 0;
  EXPECT_TRUE(o.Validate().ok());
}

TEST_F(EngineUsageTest, WatermarkComesFromTheConfig) {
  const std::string base = "tiers:\n  - name: host\n    type: host\n    capacity: 1MiB\n";
  auto c = ParseConfig(base, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->runtime.gpu_watermark, 0.01);
  c = ParseConfig("runtime:\n  gpu_watermark: 0.25\n" + base, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->runtime.gpu_watermark, 0.25);
  c = ParseConfig(base, "t.yaml", std::vector<std::string>{"runtime.gpu_watermark=0"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->runtime.gpu_watermark, 0.0);
  c = ParseConfig("runtime:\n  gpu_watermark: 1\n" + base, "t.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("gpu_watermark is 1.000000; expected a fraction in [0, 1)"),
            std::string::npos)
      << c.status().message();
}

TEST_F(EngineUsageTest, AdmissionWithWatermarkOff) {
  Open(0);
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(1000));  // nothing reported yet
  ASSERT_TRUE(rt_->ReportEngineUsage(10, 100).ok());
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(0));
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(10));   // fits exactly
  EXPECT_FALSE(rt_->ShouldAdmitNewRequest(11));  // does not fit
  ASSERT_TRUE(rt_->ReportEngineUsage(30, 100).ok());
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(21));
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(30));
  // Off: no preemption to restore a watermark; only what is asked for.
  EXPECT_TRUE(rt_->ProposePreemption(0).empty());
}

TEST_F(EngineUsageTest, AdmissionWithWatermarkOn) {
  Open(0.1);
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(1000));  // nothing reported yet
  ASSERT_TRUE(rt_->ReportEngineUsage(30, 100).ok());
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(20));   // leaves 10 = 10% free
  EXPECT_FALSE(rt_->ShouldAdmitNewRequest(21));  // leaves 9 < 10
  EXPECT_FALSE(rt_->ShouldAdmitNewRequest(30));
  ASSERT_TRUE(rt_->ReportEngineUsage(10, 100).ok());
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(0));
  EXPECT_FALSE(rt_->ShouldAdmitNewRequest(1));
}

// A pool exactly at the watermark is at it, not below it, even where the
// share times the pool is not exact in binary (0.07 * 100 = 7.000...01).
TEST_F(EngineUsageTest, PoolExactlyAtTheWatermarkIsNotBelowIt) {
  Open(0.07);
  ASSERT_TRUE(rt_->TrackRequest(1, kTestNs, ChainKeys({1, 2, 3}), 3).ok());
  ASSERT_TRUE(rt_->ReportEngineUsage(7, 100).ok());
  EXPECT_TRUE(rt_->ShouldAdmitNewRequest(0));
  EXPECT_FALSE(rt_->ShouldAdmitNewRequest(1));
  EXPECT_TRUE(rt_->ProposePreemption(0).empty());
  ASSERT_TRUE(rt_->ReportEngineUsage(6, 100).ok());
  EXPECT_EQ(Ids(rt_->ProposePreemption(0)), std::vector<uint64_t>{1});
}

// The saved-prefix scan takes the index lock one running request at a
// time: a lookup issued between two requests' scans is answered then, not
// after the whole scan (hundreds of requests of thousands of blocks).
TEST_F(EngineUsageTest, LookupsAreServedBetweenTwoRequestsPreemptionScans) {
  Open(0.01);
  const auto a = ChainKeys({1, 2, 3});
  const auto b = ChainKeys({4, 5, 6});
  SavePrefix(a, 3, 0);
  ASSERT_TRUE(rt_->TrackRequest(1, kTestNs, a, 3).ok());
  ASSERT_TRUE(rt_->TrackRequest(2, kTestNs, b, 3).ok());
  ASSERT_TRUE(rt_->ReportEngineUsage(50, 64).ok());
  int scans = 0;
  bool answered_between = false;
  // Outside the hook: a lookup still waiting when the hook returns must not
  // be joined inside it, where the old code held the lock it waits for.
  std::future<size_t> lookup;
  static_cast<internal::RuntimeImpl*>(rt_.get())->TEST_SetAfterSavedPrefix([&] {
    if (scans++ != 0) return;
    lookup = std::async(std::launch::async, [&] {
      auto r = rt_->Lookup(kTestNs, a);
      return r.ok() ? r->hit_blocks : size_t{0};
    });
    answered_between = lookup.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  });
  EXPECT_EQ(Ids(rt_->ProposePreemption(6)).size(), 2u);
  EXPECT_EQ(scans, 2);
  EXPECT_TRUE(answered_between);
  ASSERT_TRUE(lookup.valid());
  EXPECT_EQ(lookup.get(), 3u);
}

TEST_F(EngineUsageTest, ProposalsAreCheapestToRestoreFirstAndCoverTheTarget) {
  Open(0.01);
  auto a = ChainKeys({1, 2, 3, 4});      // nothing saved: 4 blocks to save
  auto b = ChainKeys({11, 12, 13, 14});  // all saved: 0
  auto c = ChainKeys({21, 22, 23, 24});  // half saved: 2
  auto d = ChainKeys({31, 32, 33, 34});  // all keys saved, 2 more blocks: 2
  SavePrefix(b, 4, 0);
  SavePrefix(c, 2, 4);
  SavePrefix(d, 4, 8);
  ASSERT_TRUE(rt_->TrackRequest(1, kTestNs, a, 4).ok());
  ASSERT_TRUE(rt_->TrackRequest(2, kTestNs, b, 4).ok());
  ASSERT_TRUE(rt_->TrackRequest(3, kTestNs, c, 4).ok());
  ASSERT_TRUE(rt_->TrackRequest(4, kTestNs, d, 6).ok());
  ASSERT_TRUE(rt_->TrackRequest(5, kTestNs, {}, 0).ok());  // holds nothing: never proposed
  ASSERT_TRUE(rt_->ReportEngineUsage(50, 64).ok());        // watermark keeps ceil(0.64) = 1

  EXPECT_TRUE(rt_->ProposePreemption(0).empty());
  EXPECT_EQ(Ids(rt_->ProposePreemption(1)), (std::vector<uint64_t>{2}));
  EXPECT_EQ(Ids(rt_->ProposePreemption(4)), (std::vector<uint64_t>{2}));
  // d and c cost 2 each; d frees 6 blocks, so it comes first.
  EXPECT_EQ(Ids(rt_->ProposePreemption(5)), (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(Ids(rt_->ProposePreemption(10)), (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(Ids(rt_->ProposePreemption(11)), (std::vector<uint64_t>{2, 4, 3}));
  EXPECT_EQ(Ids(rt_->ProposePreemption(15)), (std::vector<uint64_t>{2, 4, 3, 1}));
  auto all = rt_->ProposePreemption(1000);  // not enough: every request holding blocks
  ASSERT_EQ(Ids(all), (std::vector<uint64_t>{2, 4, 3, 1}));

  EXPECT_EQ(all[0].ns, kTestNs);
  EXPECT_EQ(all[0].blocks_freed, 4u);
  EXPECT_EQ(all[0].saved_blocks, 4u);
  EXPECT_EQ(all[0].parent, b[3]);
  EXPECT_TRUE(all[0].unsaved_keys.empty());
  EXPECT_EQ(all[1].blocks_freed, 6u);
  EXPECT_EQ(all[1].saved_blocks, 4u);
  EXPECT_TRUE(all[1].unsaved_keys.empty());
  EXPECT_EQ(all[2].blocks_freed, 4u);
  EXPECT_EQ(all[2].saved_blocks, 2u);
  EXPECT_EQ(all[2].parent, c[1]);
  EXPECT_EQ(all[2].unsaved_keys, (std::vector<BlockKey>{c[2], c[3]}));
  EXPECT_EQ(all[3].blocks_freed, 4u);
  EXPECT_EQ(all[3].saved_blocks, 0u);
  EXPECT_FALSE(all[3].parent.has_value());
  EXPECT_EQ(all[3].unsaved_keys, a);

  // 0 + 1 + 1 + 2 + 2 + 3 + 4 + 4 requests proposed above.
  EXPECT_EQ(rt_->Stats().preemption_proposals, 17u);
}

TEST_F(EngineUsageTest, CrossedWatermarkProposesEnoughToRestoreIt) {
  Open(0.1);
  ASSERT_TRUE(rt_->TrackRequest(1, kTestNs, ChainKeys({1, 2}), 3).ok());
  ASSERT_TRUE(rt_->TrackRequest(2, kTestNs, ChainKeys({5, 6}), 3).ok());
  ASSERT_TRUE(rt_->TrackRequest(3, kTestNs, ChainKeys({9}), 3).ok());
  ASSERT_TRUE(rt_->ReportEngineUsage(10, 100).ok());  // exactly at the watermark
  EXPECT_TRUE(rt_->ProposePreemption(0).empty());
  ASSERT_TRUE(rt_->ReportEngineUsage(5, 100).ok());  // 5 blocks short of 10 free
  // Nothing saved and 3 blocks each: the costs tie, lower ids go first.
  EXPECT_EQ(Ids(rt_->ProposePreemption(0)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Ids(rt_->ProposePreemption(2)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Ids(rt_->ProposePreemption(7)), (std::vector<uint64_t>{1, 2, 3}));
  // Untracked requests are no longer proposed; re-tracking replaces.
  rt_->UntrackRequest(1);
  ASSERT_TRUE(rt_->TrackRequest(3, kTestNs, ChainKeys({9}), 5).ok());
  auto v = rt_->ProposePreemption(0);  // 2 costs 3 blocks, 3 now costs 5
  ASSERT_EQ(Ids(v), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(v[0].blocks_freed, 3u);
  EXPECT_EQ(v[1].blocks_freed, 5u);
  ASSERT_TRUE(rt_->ReportEngineUsage(7, 100).ok());
  EXPECT_EQ(Ids(rt_->ProposePreemption(0)), (std::vector<uint64_t>{2}));
}

TEST_F(EngineUsageTest, VictimIsSavedBeforeItsBlocksAreFreed) {
  Open(0.01);
  auto keys = ChainKeys({1, 2, 3, 4, 5});
  SavePrefix(keys, 2, 0);
  EXPECT_TRUE(rt_->IsSaved(kTestNs, {}));
  EXPECT_TRUE(rt_->IsSaved(kTestNs, std::span(keys).first(2)));
  EXPECT_FALSE(rt_->IsSaved(kTestNs, keys));
  ASSERT_TRUE(rt_->TrackRequest(9, kTestNs, keys, 5).ok());
  auto v = rt_->ProposePreemption(1);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].saved_blocks, 2u);
  EXPECT_EQ(v[0].unsaved_keys, std::vector<BlockKey>(keys.begin() + 2, keys.end()));

  // The engine's part: save the unsaved keys from their engine blocks (the
  // request holds blocks 0..4 for keys 0..4), wait, then free its blocks.
  sim_->Prefill(keys, 0);
  std::vector<uint32_t> blocks = {2, 3, 4};
  Completion c = rt_->Save(v[0].ns, v[0].parent, v[0].unsaved_keys, blocks);
  ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
  EXPECT_TRUE(rt_->IsSaved(kTestNs, keys));
  v = rt_->ProposePreemption(1);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].saved_blocks, 5u);
  EXPECT_TRUE(v[0].unsaved_keys.empty());
  rt_->UntrackRequest(9);
  EXPECT_TRUE(rt_->ProposePreemption(1).empty());

  // It resumes by load: every block comes back byte for byte.
  sim_->Scrub(0, 64);
  Completion l = sim_->Load(keys, 20);
  ASSERT_TRUE(l.status().ok()) << l.status().ToString();
  for (uint32_t i = 0; i < 5; ++i) EXPECT_TRUE(sim_->Holds(20 + i, keys[i]));
}

// Nothing keeps a victim's saved prefix stored: here the hub drops keys[1]
// between the proposal and the victim's save. Saving unsaved_keys under
// `parent` then fails; saving the whole chain (`keys`, stored ones skipped)
// stores it again and the request can be freed.
TEST(EngineUsageVictim, VictimWholeChainSaveSurvivesItsPrefixLeavingTheHub) {
  EngineSetup setup = MakeEngine(64);
  auto opened = Runtime::Open(MakeOptions(setup.layout.BlockBytes(), 6), setup.engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Runtime& rt = **opened;
  SimEngine sim(&rt, setup.engine.get());
  const auto keys = ChainKeys({1, 2, 3, 4});
  sim.Prefill(keys, 0);  // the request holds engine blocks 0..3
  ASSERT_TRUE(rt.Save(kTestNs, std::nullopt, std::span(keys).first(2), std::vector<uint32_t>{0, 1})
                  .Wait()
                  .ok());
  ASSERT_TRUE(rt.TrackRequest(9, kTestNs, keys, 4).ok());
  auto v = rt.ProposePreemption(1);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].saved_blocks, 2u);
  EXPECT_EQ(v[0].keys, keys);

  // Other requests' saves fill the hub; its least recent leaf, keys[1], goes.
  for (uint64_t id = 100; id < 120 && rt.IsSaved(kTestNs, std::span(keys).first(2)); ++id) {
    const auto other = ChainKeys({id});
    sim.Prefill(other, 10);
    ASSERT_TRUE(sim.SaveFrom(other, 0, 10).status().ok());
  }
  ASSERT_FALSE(rt.IsSaved(kTestNs, std::span(keys).first(2)));
  const std::vector<uint32_t> unsaved_blocks{2, 3};
  Completion old_way = rt.Save(v[0].ns, v[0].parent, v[0].unsaved_keys, unsaved_blocks);
  ASSERT_EQ(old_way.Wait().code(), StatusCode::kInvalidArgument);

  const std::vector<uint32_t> blocks{0, 1, 2, 3};
  Completion c = rt.Save(v[0].ns, std::nullopt, v[0].keys, blocks, {.bypass_admission = true});
  ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
  EXPECT_TRUE(rt.IsSaved(kTestNs, keys));
  sim.Scrub(0, 64);
  ASSERT_TRUE(sim.Load(keys, 20).status().ok());
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim.Holds(20 + i, keys[i])) << i;
}

}  // namespace
}  // namespace kvtier::testing
