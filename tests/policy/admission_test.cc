// Exact admission decisions on small hand-built sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kvtier/policy.h"
#include "policy/policy_internal.h"

namespace kvtier {
namespace {

BlockMeta Block(uint64_t id, uint64_t bytes = 100, double flops = 0) {
  BlockMeta b;
  b.id = id;
  b.bytes = bytes;
  b.flops = flops;
  return b;
}

std::unique_ptr<AdmissionPolicy> Make(const char* name, const PolicyKnobs& k = {}) {
  auto p = CreateAdmissionPolicy(name, k);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(*p);
}

void Observe(AdmissionPolicy& p, std::vector<uint64_t> chain, RequestHints h = {}) {
  p.ObserveRequest(chain, static_cast<uint32_t>(chain.size()), h, 0);
}

TEST(AdmissionTest, AlwaysAdmits) {
  auto p = Make("always");
  EXPECT_TRUE(p->Admit(Block(1), {}));
}

TEST(AdmissionTest, UnknownNameAndMissingBudgetAreRefused) {
  EXPECT_EQ(CreateAdmissionPolicy("sometimes", {}).status().message(),
            "unknown admission policy 'sometimes'");
  EXPECT_EQ(CreateAdmissionPolicy("write_budget", {}).status().message(),
            "write_budget admission needs write_budget_bytes_per_day > 0");
}

TEST(AdmissionTest, FrequencyAdmitsOnNthSightingAndAges) {
  PolicyKnobs k;
  k.frequency_threshold = 2;
  k.sketch_aging_period = 6;  // halve after six increments
  auto p = Make("frequency", k);
  struct Step {
    std::vector<uint64_t> observe;
    std::vector<std::pair<uint64_t, bool>> expect;
  };
  const std::vector<Step> steps = {
      {{1, 2}, {{1, false}, {2, false}, {3, false}}},
      {{1, 3}, {{1, true}, {2, false}, {3, false}}},
      {{1, 3}, {{1, false}, {3, false}}},  // 6th increment halved 1: 3 -> 1, 3: 2 -> 1
      {{3}, {{3, true}, {1, false}}},
  };
  for (size_t s = 0; s < steps.size(); ++s) {
    Observe(*p, steps[s].observe);
    for (auto [id, want] : steps[s].expect) {
      EXPECT_EQ(p->Admit(Block(id), {}), want) << "step " << s << " id " << id;
    }
  }
}

// With the default knobs, 800,000 sightings of ids seen once (8000 chains of
// 100 fresh ids) leave the sketch able to tell: ids never seen stay out, an
// id named twice since gets in.
TEST(AdmissionTest, FrequencySketchDoesNotSaturate) {
  auto p = Make("frequency");
  uint64_t next = 1;
  for (int c = 0; c < 8000; ++c) {
    std::vector<uint64_t> chain(100);
    for (uint64_t& id : chain) id = next++;
    Observe(*p, chain);
  }
  int admitted = 0;
  for (uint64_t i = 0; i < 1000; ++i) admitted += p->Admit(Block(next + i), {}) ? 1 : 0;
  EXPECT_LT(admitted, 50) << "of 1000 ids never seen";
  Observe(*p, {0xabc});
  Observe(*p, {0xabc});
  EXPECT_TRUE(p->Admit(Block(0xabc), {}));
}

TEST(AdmissionTest, MarconiSharedPrefixBranchAndTails) {
  PolicyKnobs k;
  k.marconi_probation = 0;  // no speculative share: decisions from the tree only
  auto p = Make("marconi", k);
  Observe(*p, {1, 2, 3});
  for (uint64_t id : {1, 2, 3}) EXPECT_FALSE(p->Admit(Block(id), {})) << id;
  Observe(*p, {1, 2, 4});  // branches after 2
  const std::vector<std::pair<uint64_t, bool>> kv = {{1, true}, {2, true}, {3, false}, {4, false}};
  for (auto [id, want] : kv) EXPECT_EQ(p->Admit(Block(id), {}), want) << id;
  // State checkpoints: only at the branch point and at tails.
  const std::vector<std::pair<uint64_t, bool>> cp = {{1, false}, {2, true}, {3, true}, {4, true}};
  for (auto [id, want] : cp) {
    BlockMeta b = Block(id);
    b.is_checkpoint = true;
    EXPECT_EQ(p->Admit(b, {}), want) << "checkpoint " << id;
  }
}

TEST(AdmissionTest, MarconiCheckpointsOnlyAdmitsEveryKvBlock) {
  PolicyKnobs k;
  k.marconi_probation = 0;
  k.marconi_checkpoints_only = true;
  auto p = Make("marconi", k);
  Observe(*p, {1, 2, 3});
  Observe(*p, {1, 2, 4});
  for (uint64_t id : {1, 2, 3, 4, 99}) EXPECT_TRUE(p->Admit(Block(id), {})) << id;
  // Checkpoints are judged as without the knob: branch point and tails.
  const std::vector<std::pair<uint64_t, bool>> cp = {{1, false}, {2, true}, {3, true}, {4, true}};
  for (auto [id, want] : cp) {
    BlockMeta b = Block(id);
    b.is_checkpoint = true;
    EXPECT_EQ(p->Admit(b, {}), want) << "checkpoint " << id;
  }
}

TEST(AdmissionTest, MarconiKeepsContinuingSessionPaths) {
  PolicyKnobs k;
  k.marconi_probation = 0;
  auto p = Make("marconi", k);
  Observe(*p, {10, 11}, {.session_id = 7});
  EXPECT_FALSE(p->Admit(Block(11), {}));  // a session's first request
  Observe(*p, {10, 11, 12}, {.session_id = 7});
  EXPECT_TRUE(p->Admit(Block(12), {}));  // the session came back: its tail is kept
  Observe(*p, {20, 21}, {.expected_reuse = 0.9f});
  EXPECT_TRUE(p->Admit(Block(21), {}));
  Observe(*p, {30, 31}, {.expected_reuse = 0.1f});
  EXPECT_FALSE(p->Admit(Block(31), {}));
}

// A Save's session id admits blocks no lookup named yet (a turn's decoded
// blocks) once the session has come back; a first request's do not.
TEST(AdmissionTest, MarconiAdmitsSavedBlocksOfAContinuingSession) {
  PolicyKnobs k;
  k.marconi_probation = 0;
  auto p = Make("marconi", k);
  auto saved = [](uint64_t id, uint64_t session) {
    BlockMeta b = Block(id);
    b.session_id = session;
    return b;
  };
  Observe(*p, {10, 11}, {.session_id = 7});
  EXPECT_FALSE(p->Admit(saved(50, 7), {})) << "the session's first request";
  Observe(*p, {10, 11, 12}, {.session_id = 7});
  EXPECT_TRUE(p->Admit(saved(51, 7), {})) << "the session came back";
  EXPECT_FALSE(p->Admit(saved(52, 8), {})) << "a session never looked up";
  EXPECT_FALSE(p->Admit(saved(53, 0), {})) << "no session";
  k.marconi_admit_tails = false;
  auto off = Make("marconi", k);
  Observe(*off, {10}, {.session_id = 7});
  Observe(*off, {10, 11}, {.session_id = 7});
  EXPECT_FALSE(off->Admit(saved(51, 7), {})) << "tails off: sessions keep nothing";
}

// Marconi remembers the 65536 most recently seen sessions: one idle while
// that many others came back is new again, one that keeps coming stays known.
TEST(AdmissionTest, MarconiForgetsTheLeastRecentSessionsPastItsBound) {
  constexpr uint64_t kBound = 65536;
  PolicyKnobs k;
  k.marconi_probation = 0;
  auto p = Make("marconi", k);
  Observe(*p, {1}, {.session_id = 1});  // the session that goes idle
  Observe(*p, {2}, {.session_id = 2});  // the session that keeps coming
  for (uint64_t s = 3; s < kBound + 2; ++s) {
    Observe(*p, {100 + s}, {.session_id = s});
    if (s % 1024 == 0) Observe(*p, {200 + s}, {.session_id = 2});
  }
  Observe(*p, {1, 11}, {.session_id = 1});
  EXPECT_FALSE(p->Admit(Block(11), {})) << "session 1 was forgotten: not continuing";
  Observe(*p, {2, 12}, {.session_id = 2});
  EXPECT_TRUE(p->Admit(Block(12), {})) << "session 2 was seen recently: continuing";
  Observe(*p, {1, 13}, {.session_id = 1});
  EXPECT_TRUE(p->Admit(Block(13), {})) << "session 1 is known again";
}

// Past its bound marconi forgets the least recently named blocks, as many as
// each request adds, and keeps the rest: a prefix every request names stays
// a branch point, the blocks named twice most recently stay shared, and the
// tree never holds more than its bound (here every block it holds is named
// twice, so the blocks it admits are exactly the ones it holds).
TEST(AdmissionTest, MarconiForgetsTheLeastRecentlyNamedBlocksPastItsBound) {
  constexpr uint64_t kBound = 64, kPrefix = 1, kFirst = 100, kRequests = 300;
  PolicyKnobs k;
  k.marconi_probation = 0;
  auto made = internal::NewMarconiAdmission(k, kBound);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  AdmissionPolicy& p = **made;
  BlockMeta prefix = Block(kPrefix);
  prefix.is_checkpoint = true;
  for (uint64_t r = 0; r < kRequests; ++r) {
    const uint64_t tail = kFirst + r;
    Observe(p, {kPrefix, tail});
    Observe(p, {kPrefix, tail});
    ASSERT_TRUE(p.Admit(Block(tail), {})) << "named twice just now, request " << r;
    if (r > 0) ASSERT_TRUE(p.Admit(prefix, {})) << "a branch point, request " << r;
    uint64_t held = p.Admit(Block(kPrefix), {}) ? 1 : 0;
    for (uint64_t id = kFirst; id <= tail; ++id) held += p.Admit(Block(id), {}) ? 1 : 0;
    ASSERT_EQ(held, std::min(r + 2, kBound)) << "blocks held after request " << r;
  }
  const uint64_t kept = kFirst + kRequests - (kBound - 1);  // the oldest tail still held
  EXPECT_FALSE(p.Admit(Block(kept - 1), {})) << "the most recent of the forgotten tails";
  EXPECT_TRUE(p.Admit(Block(kept), {})) << "the oldest tail kept";
  // A forgotten block named again is new: seen once, not shared.
  Observe(p, {kPrefix, kFirst});
  EXPECT_FALSE(p.Admit(Block(kFirst), {}));
}

TEST(AdmissionTest, CostAdmitsWhenLoadBeatsRecomputeOrTheCostIsUnknown) {
  auto p = Make("cost");
  TierState t;
  t.read_bytes_per_s = 1e9;
  t.read_latency_s = 0.001;
  t.gpu_flops_per_s = 1e15;
  struct Case {
    uint64_t bytes;
    double flops;
    bool want;
  };
  const Case cases[] = {
      {1000000000, 2e15, true},   // load 1.001 s < recompute 2 s
      {1000000000, 1e15, false},  // 1.001 s > 1 s
      {1000000, 1.1e12, false},   // 2 ms load vs 1.1 ms recompute
      {1000000, 2.1e12, true},
      {1000000000, 1, false},  // known and cheap: refused
      // FLOPs of 0 mean the runtime does not know the block's tokens
      // (block_tokens = 0): like unknown rates, they admit.
      {4096, 0, true},
      {1000000000, 0, true},  // however slow the load
      {4096, -1, true},       // not a real cost either
      {4096, std::numeric_limits<double>::quiet_NaN(), true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(p->Admit(Block(1, c.bytes, c.flops), t), c.want) << c.bytes << " " << c.flops;
  }
  EXPECT_TRUE(p->Admit(Block(1, 1000000000, 1), TierState{}));  // unknown rates admit
}

TEST(AdmissionTest, WriteBudgetConvergesToTargetRate) {
  PolicyKnobs k;
  k.write_budget_bytes_per_day = 86400ULL * 2000000;  // 2 MB/s at the device
  k.write_amplification = 2.0;                        // so 1 MB/s from the host
  k.write_interval_ms = 1000;
  auto p = Make("write_budget", k);
  // 10 MB/s offered: a 10 kB block every millisecond for 200 s.
  uint64_t written = 0, written_late = 0;
  const uint64_t ms = 1000000;
  for (uint64_t i = 0; i < 200000; ++i) {
    BlockMeta b = Block(i, 10000);
    TierState t;
    t.now_ns = i * ms;
    if (p->Admit(b, t)) {
      p->OnWritten(b.bytes, t.now_ns);
      written += b.bytes;
      if (i >= 100000) written_late += b.bytes;
    }
  }
  // Target 1 MB/s: 200 MB overall and 100 MB in the second half, within 3 %.
  EXPECT_NEAR(double(written), 200e6, 6e6);
  EXPECT_NEAR(double(written_late), 100e6, 3e6);
}

TEST(AdmissionTest, ChainNeedsEveryPolicy) {
  PolicyKnobs k;
  k.frequency_threshold = 2;
  std::vector<std::string> names = {"always", "frequency"};
  auto chain = AdmissionChain::Create(names, k);
  ASSERT_TRUE(chain.ok());
  std::vector<uint64_t> c = {5};
  chain->ObserveRequest(c, 1, {}, 0);
  EXPECT_FALSE(chain->Admit(Block(5), {}));
  chain->ObserveRequest(c, 1, {}, 0);
  EXPECT_TRUE(chain->Admit(Block(5), {}));
}

// The share is rounded up, but a product within floating-point error of a
// whole number is that number: 0.07, 0.14, 0.28, 0.55 and 0.56 of 100 all
// overshoot their whole number as doubles.
TEST(GpuWatermarkTest, KeepsTheExactShareOfThePool) {
  for (int percent : {7, 14, 28, 55, 56, 10, 1}) {
    GpuWatermark wm(percent / 100.0, 1e15);
    EXPECT_EQ(wm.KeepBlocks(100), uint64_t(percent)) << percent;
    wm.Report(uint32_t(percent) + 5, 100);
    EXPECT_TRUE(wm.ShouldAdmit(5)) << percent;
    EXPECT_FALSE(wm.ShouldAdmit(6)) << percent;
  }
  EXPECT_EQ(GpuWatermark(0.1, 1e15).KeepBlocks(64), 7u);   // 6.4 rounds up
  EXPECT_EQ(GpuWatermark(0.01, 1e15).KeepBlocks(64), 1u);  // 0.64 rounds up
  EXPECT_EQ(GpuWatermark(0, 1e15).KeepBlocks(4096), 0u);
  EXPECT_EQ(GpuWatermark(0.5, 1e15).KeepBlocks(UINT32_MAX), 2147483648u);
}

TEST(GpuWatermarkTest, HoldsBackAdmissionAndProposesCheapestVictims) {
  GpuWatermark wm(0.1, 1e15);
  EXPECT_TRUE(wm.ShouldAdmit(1000));  // nothing reported yet
  wm.Report(30, 100);
  EXPECT_TRUE(wm.ShouldAdmit(20));  // 10 left = 10 %
  EXPECT_FALSE(wm.ShouldAdmit(21));
  EXPECT_FALSE(wm.ShouldAdmit(31));
  std::vector<RunningRequest> running = {
      {.request_id = 1, .blocks_held = 10, .restore_load_s = 0.5, .recompute_flops = 0},
      {.request_id = 2, .blocks_held = 4, .restore_load_s = 0.1, .recompute_flops = 1e14},
      {.request_id = 3, .blocks_held = 6, .restore_load_s = 0.05, .recompute_flops = 0},
  };
  auto v = wm.Propose(running, 8);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].request_id, 3u);  // 0.05 s
  EXPECT_EQ(v[1].request_id, 2u);  // 0.2 s
  EXPECT_EQ(v[0].blocks_freed + v[1].blocks_freed, 10u);
  EXPECT_EQ(wm.Propose(running, 100).size(), 3u);
}

// Knobs from an engine's own arithmetic may be NaN or out of range: they are
// clamped, never cast or sorted as they are (both undefined behaviour).
TEST(GpuWatermarkTest, OutOfRangeInputsAreClamped) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(GpuWatermark(nan).KeepBlocks(100), 0u);
  EXPECT_EQ(GpuWatermark(-0.5).KeepBlocks(100), 0u);
  EXPECT_EQ(GpuWatermark(2.0).KeepBlocks(100), 100u);
  EXPECT_EQ(GpuWatermark(nan).watermark(), 0.0);
  // No usable GPU rate: recompute is left out, the load time alone ranks.
  GpuWatermark no_rate(0.1, nan);
  std::vector<RunningRequest> running = {
      {.request_id = 1, .blocks_held = 4, .restore_load_s = 0.2, .recompute_flops = 1e20},
      {.request_id = 2, .blocks_held = 4, .restore_load_s = nan, .recompute_flops = 0},
      {.request_id = 3, .blocks_held = 4, .restore_load_s = 0.1, .recompute_flops = 1e20},
  };
  auto v = no_rate.Propose(running, 12);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].request_id, 3u);
  EXPECT_EQ(v[1].request_id, 1u);
  EXPECT_EQ(v[2].request_id, 2u);  // NaN cost: dearest
  EXPECT_DOUBLE_EQ(v[0].restore_cost_s, 0.1);
}

}  // namespace
}  // namespace kvtier
