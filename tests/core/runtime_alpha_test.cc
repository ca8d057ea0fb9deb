// α tuning of flop_aware tiers in the runtime: lookups fill the window, the
// mover (never the Lookup caller) replays it over the α grid and sets the
// winner; the YAML keys that drive it. And lookup hints reaching admission.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/tier_policies.h"
#include "kvtier/config.h"
#include "kvtier/policy.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

using internal::AlphaGridFrom;
using internal::kAlphaGrid;
using internal::PolicyId;

// Request chains of block ids, root first.
using Trace = std::vector<std::vector<uint64_t>>;

// A 6-block chain A asked for again and again, four one-block roots between
// its requests. In 8 blocks A's deep (expensive) leaves survive the roots
// only when FLOPs weigh enough against recency.
Trace ReusedDeepChain() {
  Trace t;
  uint64_t root = 1000;
  for (int round = 0; round < 3; ++round) {
    t.push_back({100, 101, 102, 103, 104, 105});
    for (int i = 0; i < 4; ++i) t.push_back({root++});
  }
  return t;
}

// A 6-block chain B asked for once, then four cheap roots in a cycle. In 8
// blocks the roots hit only when recency wins over B's FLOPs.
Trace OneOffDeepChain() {
  Trace t{{200, 201, 202, 203, 204, 205}};
  for (int i = 0; i < 14; ++i) t.push_back({uint64_t(300 + i % 4)});
  return t;
}

class RuntimeAlphaTest : public ::testing::Test {
 protected:
  RuntimeAlphaTest() : setup_(MakeEngine(64)), bb_(setup_.layout.BlockBytes()) {}

  // A flop_aware hub of 8 blocks starting at `alpha`.
  RuntimeOptions Options(double alpha, uint32_t every, uint32_t window, bool thread = false) {
    RuntimeOptions o = MakeOptions(bb_, kHubBlocks, thread);
    o.block_tokens = setup_.layout.block_tokens;
    o.tiers[0].eviction = "flop_aware";
    o.tiers[0].policy.flop_alpha = alpha;
    o.tiers[0].policy.alpha_tune_every = every;
    o.tiers[0].policy.alpha_tune_window = window;
    return o;
  }
  void Open(const RuntimeOptions& o) {
    options_ = o;
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
  }
  void LookUp(const Trace& trace) {
    for (const auto& ids : trace) ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys(ids)).ok());
  }
  // The window as the runtime records it: policy ids, block bytes and the
  // FLOPs of each block's depth under the runtime's model.
  std::vector<TuneRequest> Window(const Trace& trace) const {
    std::vector<TuneRequest> w;
    for (const auto& ids : trace) {
      auto keys = ChainKeys(ids);
      TuneRequest r;
      for (uint32_t d = 0; d < keys.size(); ++d) {
        BlockMeta m;
        m.id = PolicyId({kTestNs, keys[d]});
        m.depth = d;
        m.bytes = bb_;
        const uint64_t bt = options_.block_tokens;
        m.flops = options_.model_cost.SpanFlops(d * bt, (d + 1) * bt);
        r.blocks.push_back(m);
      }
      w.push_back(std::move(r));
    }
    return w;
  }
  double Tune(const Trace& trace, double current) const {
    const std::vector<double> grid = AlphaGridFrom(current);
    return TuneAlpha(Window(trace), kHubBlocks, grid);
  }
  double Saved(const Trace& trace, double alpha) const {
    return ReplayFlopsSaved(Window(trace), kHubBlocks, alpha);
  }
  TierStats Hub() const { return rt_->Stats().tiers[0]; }
  void MoveOnce() { ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok()); }

  static constexpr uint64_t kHubBlocks = 8;
  EngineSetup setup_;
  const uint64_t bb_;
  RuntimeOptions options_;
  std::unique_ptr<Runtime> rt_;
};

TEST_F(RuntimeAlphaTest, TheGridStartsWithTheAlphaInUse) {
  EXPECT_EQ(AlphaGridFrom(0), (std::vector<double>{0, 0.5, 1, 2, 4}));
  EXPECT_EQ(AlphaGridFrom(2), (std::vector<double>{2, 0, 0.5, 1, 4}));
  EXPECT_EQ(AlphaGridFrom(3), (std::vector<double>{3, 0, 0.5, 1, 2, 4}));
}

TEST_F(RuntimeAlphaTest, TuningRaisesAlphaWhenADeepChainComesBack) {
  const Trace trace = ReusedDeepChain();
  Open(Options(/*alpha=*/0, /*every=*/15, /*window=*/15));
  ASSERT_EQ(trace.size(), 15u);
  LookUp(trace);
  // The tuning is due, but lookups never run it.
  EXPECT_EQ(Hub().alpha_tunings, 0u);
  EXPECT_EQ(Hub().flop_alpha, 0.0);
  MoveOnce();
  const double expected = Tune(trace, 0);
  EXPECT_EQ(expected, 1.0);
  // 1 is the smallest α that keeps A's leaves: strictly better than 0 and
  // 0.5, as good as any larger one.
  EXPECT_GT(Saved(trace, 1), Saved(trace, 0));
  EXPECT_GT(Saved(trace, 1), Saved(trace, 0.5));
  for (double a : kAlphaGrid) EXPECT_GE(Saved(trace, 1), Saved(trace, a)) << a;
  EXPECT_EQ(Hub().alpha_tunings, 1u);
  EXPECT_EQ(Hub().flop_alpha, expected);
  // Nothing new seen: the next pass does not tune again.
  MoveOnce();
  EXPECT_EQ(Hub().alpha_tunings, 1u);
}

TEST_F(RuntimeAlphaTest, TuningLowersAlphaWhenTheDeepChainNeverReturns) {
  const Trace trace = OneOffDeepChain();
  Open(Options(/*alpha=*/4, /*every=*/15, /*window=*/15));
  LookUp(trace);
  MoveOnce();
  const double expected = Tune(trace, 4);
  EXPECT_EQ(expected, 0.0);
  EXPECT_GT(Saved(trace, 0), Saved(trace, 4));
  for (double a : kAlphaGrid) EXPECT_GE(Saved(trace, 0), Saved(trace, a)) << a;
  EXPECT_EQ(Hub().alpha_tunings, 1u);
  EXPECT_EQ(Hub().flop_alpha, expected);
}

TEST_F(RuntimeAlphaTest, ATuningReplaysOnlyTheLastWindowOfRequests) {
  Trace all = OneOffDeepChain();
  const Trace last = ReusedDeepChain();
  all.insert(all.end(), last.begin(), last.end());
  Open(Options(/*alpha=*/1, /*every=*/30, /*window=*/15));
  LookUp(all);
  MoveOnce();
  const double expected = Tune(last, 1);
  ASSERT_NE(expected, Tune(all, 1));  // the window bound matters here
  EXPECT_EQ(Hub().alpha_tunings, 1u);
  EXPECT_EQ(Hub().flop_alpha, expected);
}

TEST_F(RuntimeAlphaTest, TuneEveryZeroNeverTunes) {
  Open(Options(/*alpha=*/0, /*every=*/0, /*window=*/15));
  for (int i = 0; i < 4; ++i) {
    LookUp(ReusedDeepChain());
    MoveOnce();
  }
  EXPECT_EQ(Hub().alpha_tunings, 0u);
  EXPECT_EQ(Hub().flop_alpha, 0.0);
}

TEST_F(RuntimeAlphaTest, OnlyFlopAwareTiersReportAnAlpha) {
  RuntimeOptions o = Options(0, 15, 15);
  o.tiers.push_back(LowerHostTier("ssd", bb_, 16));  // lru
  Open(o);
  LookUp(ReusedDeepChain());
  MoveOnce();
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[0].alpha_tunings, 1u);
  EXPECT_EQ(st.tiers[1].flop_alpha, -1.0);
  EXPECT_EQ(st.tiers[1].alpha_tunings, 0u);
  EXPECT_EQ(st.tiers[0].flop_alpha, 1.0);  // as in TuningRaisesAlpha...
  PrometheusTextWriter w;
  rt_->VisitMetrics(w.Visitor());
  const std::string text = w.Text();
  for (const char* line : {"kvtier_tier_flop_alpha{tier=\"host\",type=\"host\"} 1\n",
                           "kvtier_tier_alpha_tunings_total{tier=\"host\",type=\"host\"} 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  }
  EXPECT_EQ(text.find("kvtier_tier_flop_alpha{tier=\"ssd\""), std::string::npos);
  EXPECT_EQ(text.find("kvtier_tier_alpha_tunings_total{tier=\"ssd\""), std::string::npos);
}

TEST_F(RuntimeAlphaTest, TheMoverThreadTunesWhenLookupsMakeItDue) {
  RuntimeOptions o = Options(/*alpha=*/0, /*every=*/15, /*window=*/15, /*thread=*/true);
  o.mover.interval_ms = 60000;  // only the lookup's wake-up can start a pass soon
  Open(o);
  const Trace trace = ReusedDeepChain();
  LookUp(trace);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Hub().alpha_tunings == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(Hub().alpha_tunings, 1u);
  EXPECT_EQ(Hub().flop_alpha, Tune(trace, 0));
}

TEST(AlphaConfigTest, PolicyMapSetsTheTuningKnobs) {
  Result<KvtierConfig> r = ParseConfig(
      "tiers: [{name: h, type: host, capacity: 1MiB, eviction: flop_aware,\n"
      "         policy: {alpha_tune_every: 0, alpha_tune_window: 9}}]\n",
      "a.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.tiers[0].policy.alpha_tune_every, 0u);
  EXPECT_EQ(r->runtime.tiers[0].policy.alpha_tune_window, 9u);
  r = ParseConfig(
      "tiers: [{name: h, type: host, capacity: 1MiB, eviction: flop_aware,\n"
      "         policy: {alpha_tune_window: 0}}]\n",
      "b.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "b.yaml:2:38: tiers.h.policy.alpha_tune_window is 0, out of range; expected a whole "
            "number from 1 to 65536");
}

// Marconi admission below the hub keeps a block on first sight only when
// the request naming it is expected to continue. probation 0: no unhinted
// request counts as continuing.
class LookupHintsTest : public ::testing::Test {
 protected:
  LookupHintsTest() : setup_(MakeEngine(64)), bb_(setup_.layout.BlockBytes()) {
    RuntimeOptions o = MakeOptions(bb_, 2);
    o.tiers[0].watermarks = {.high = 0.4, .low = 0.2};  // each saved block goes down at once
    o.tiers.push_back(LowerHostTier("ssd", bb_, 16));
    o.tiers[1].admission = {"marconi"};
    o.tiers[1].policy.marconi_probation = 0;
    auto rt = Runtime::Open(o, setup_.engine);
    EXPECT_TRUE(rt.ok()) << rt.status().ToString();
    if (rt.ok()) rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  // Saves block `id` with `hints` and runs the mover (demotes it).
  void SaveAndDemote(uint64_t id, const SaveOptions& hints = {}) {
    auto keys = ChainKeys({id});
    sim_->Prefill(keys, 0);
    const uint32_t block = 0;
    ASSERT_TRUE(rt_->Save(kTestNs, std::nullopt, keys, std::span(&block, 1), hints).Wait().ok());
    auto moved = rt_->TEST_RunMoverOnce();
    ASSERT_TRUE(moved.ok());
    ASSERT_EQ(*moved, 1u);
  }

  EngineSetup setup_;
  const uint64_t bb_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

TEST_F(LookupHintsTest, MarconiAdmitsTheTailOfAHintedLookupOnly) {
  ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys({1}), LookupOptions{.expected_reuse = 0.9f}).ok());
  SaveAndDemote(1);
  ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys({2})).ok());  // no hint
  SaveAndDemote(2);
  ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys({3}), LookupOptions{.expected_reuse = 0.2f}).ok());
  SaveAndDemote(3);  // below marconi_continue_threshold (0.5)
  {
    auto pin = rt_->LookupAndPin(kTestNs, ChainKeys({4}),
                                 LookupOptions{.session_id = 7, .expected_reuse = 0.5f});
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(pin->hit_blocks(), 0u);
  }
  SaveAndDemote(4);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 2u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 2u);
  EXPECT_EQ(st.tiers[1].blocks_written, 2u);
  EXPECT_TRUE(rt_->IsSaved(kTestNs, ChainKeys({1})));
  EXPECT_FALSE(rt_->IsSaved(kTestNs, ChainKeys({2})));
  EXPECT_FALSE(rt_->IsSaved(kTestNs, ChainKeys({3})));
  EXPECT_TRUE(rt_->IsSaved(kTestNs, ChainKeys({4})));
  EXPECT_EQ(st.lookups, 4u);
}

TEST_F(LookupHintsTest, ASessionSeenBeforeCountsAsContinuing) {
  // The first lookup of session 5 carries no reuse hint: its block is
  // refused. The session's second lookup continues it: admitted.
  ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys({1}), LookupOptions{.session_id = 5}).ok());
  SaveAndDemote(1);
  ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys({2}), LookupOptions{.session_id = 5}).ok());
  SaveAndDemote(2);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 1u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 1u);
  EXPECT_FALSE(rt_->IsSaved(kTestNs, ChainKeys({1})));
  EXPECT_TRUE(rt_->IsSaved(kTestNs, ChainKeys({2})));
}

// A block no lookup named (a decoded turn) is kept when its Save names a
// session that has come back, not when the session is new or unknown.
TEST_F(LookupHintsTest, SaveOfAContinuingSessionIsAdmitted) {
  ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys({1}), LookupOptions{.session_id = 5}).ok());
  SaveAndDemote(10, {.session_id = 5});  // first request: not continuing yet
  ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys({2}), LookupOptions{.session_id = 5}).ok());
  SaveAndDemote(11, {.session_id = 5});
  SaveAndDemote(12, {.session_id = 6});  // never looked up
  EXPECT_FALSE(rt_->IsSaved(kTestNs, ChainKeys({10})));
  EXPECT_TRUE(rt_->IsSaved(kTestNs, ChainKeys({11})));
  EXPECT_FALSE(rt_->IsSaved(kTestNs, ChainKeys({12})));
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 1u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 2u);
}

}  // namespace
}  // namespace kvtier::testing
