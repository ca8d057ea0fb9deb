// The counters a runtime reports after a known sequence of operations, in
// RuntimeStats and through the metric visitor.
#include <gtest/gtest.h>

#include <map>

#include "kvtier/metrics.h"
#include "tests/inspect/inspect_test_util.h"

namespace kvtier::testing {
namespace {

constexpr uint64_t kB = kScenarioBlockBytes;

TEST(RuntimeMetrics, ScenarioCountersAreExact) {
  auto s = OpenScenario();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RunScenario(*s);
  RuntimeStats st = s->runtime->Stats();
  EXPECT_EQ(st.lookups, 1u);
  EXPECT_EQ(st.lookup_blocks, 6u);
  EXPECT_EQ(st.lookup_hit_blocks, 4u);
  EXPECT_EQ(st.save_blocks, 8u);
  EXPECT_EQ(st.saved_blocks, 4u);
  EXPECT_EQ(st.save_duplicates, 4u);
  EXPECT_EQ(st.load_blocks, 6u);
  EXPECT_EQ(st.loaded_blocks, 4u);
  EXPECT_EQ(st.load_failures, 2u);
  EXPECT_EQ(st.block_tokens, 8u);
  EXPECT_EQ(st.preemption_proposals, 0u);

  ASSERT_EQ(st.moves.size(), 4u);
  const std::vector<std::tuple<std::string, std::string, uint64_t, uint64_t>> want = {
      {"gpu", "host", 4, 4 * kB},
      {"host", "gpu", 4, 4 * kB},
      {"host", "cold", 1, kB},
      {"cold", "host", 1, kB}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(st.moves[i].from, std::get<0>(want[i])) << i;
    EXPECT_EQ(st.moves[i].to, std::get<1>(want[i])) << i;
    EXPECT_EQ(st.moves[i].blocks, std::get<2>(want[i])) << i;
    EXPECT_EQ(st.moves[i].bytes, std::get<3>(want[i])) << i;
  }
  ASSERT_EQ(st.errors.size(), 1u);
  EXPECT_EQ(st.errors[0].op, "load");
  EXPECT_EQ(st.errors[0].code, StatusCode::kNotFound);
  EXPECT_EQ(st.errors[0].blocks, 2u);

  ASSERT_EQ(st.tiers.size(), 2u);
  EXPECT_EQ(st.tiers[0].hit_blocks, 3u);
  EXPECT_EQ(st.tiers[1].hit_blocks, 1u);
  EXPECT_EQ(st.tiers[0].demoted_blocks, 1u);
  EXPECT_EQ(st.tiers[0].evicted_blocks, 1u);
  EXPECT_EQ(st.tiers[1].blocks, 1u);

  // The clock never moved: every request lands in the first bucket.
  EXPECT_EQ(st.save_latency.count, 2u);
  EXPECT_EQ(st.load_latency.count, 2u);
  ASSERT_EQ(st.save_latency.bucket_counts.size(), st.save_latency.upper_bounds_s.size() + 1);
  EXPECT_EQ(st.save_latency.bucket_counts[0], 2u);
  EXPECT_EQ(st.load_latency.bucket_counts[0], 2u);
  EXPECT_EQ(st.load_latency.sum_s, 0.0);
}

TEST(RuntimeMetrics, LatencyFollowsTheInjectedClock) {
  auto s = OpenScenario();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  SimEngine sim(s->runtime.get(), s->engine.engine.get());
  const std::vector<BlockKey> keys = ChainKeys({1});
  sim.Prefill(keys, 0);
  ASSERT_EQ(sim.SaveFrom(keys, 0, 0).ok_count(), 1u);
  // Each of the 2 layers landing "takes" 3 ms: the load takes 6 ms.
  const std::vector<uint32_t> blocks = {5};
  Completion c = s->runtime->Load(kTestNs, keys, blocks, std::chrono::seconds(10),
                                  [&](uint32_t) { s->clock->Advance(3'000'000); });
  ASSERT_TRUE(c.Wait().ok());
  RuntimeStats st = s->runtime->Stats();
  ASSERT_EQ(st.load_latency.count, 1u);
  EXPECT_DOUBLE_EQ(st.load_latency.sum_s, 0.006);
  // Buckets: ..., 5 ms, 10 ms: 6 ms lands in the 10 ms one (index 7).
  ASSERT_DOUBLE_EQ(st.load_latency.upper_bounds_s[7], 0.010);
  for (size_t i = 0; i < st.load_latency.bucket_counts.size(); ++i) {
    EXPECT_EQ(st.load_latency.bucket_counts[i], i == 7 ? 1u : 0u) << i;
  }
  EXPECT_EQ(st.save_latency.bucket_counts[0], 1u);

  // A request refused before it is queued (bad engine block) ran nothing,
  // so it has no latency; its block failed all the same, as the engine saw.
  EXPECT_TRUE(st.errors.empty());
  const std::vector<uint32_t> bad = {9999};
  EXPECT_EQ(s->runtime->Load(kTestNs, keys, bad, std::chrono::seconds(1)).Wait().code(),
            StatusCode::kInvalidArgument);
  st = s->runtime->Stats();
  EXPECT_EQ(st.load_latency.count, 1u);
  ASSERT_EQ(st.errors.size(), 1u);
  EXPECT_EQ(st.errors[0].op, "load");
  EXPECT_EQ(st.errors[0].code, StatusCode::kInvalidArgument);
  EXPECT_EQ(st.errors[0].blocks, 1u);
  EXPECT_EQ(st.load_failures, 1u);
}

TEST(RuntimeMetrics, VisitorSeesEveryFamilyWithLabels) {
  auto s = OpenScenario();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RunScenario(*s);
  std::map<std::string, double> seen;  // name{labels} -> value
  std::map<std::string, MetricType> types;
  s->runtime->VisitMetrics([&](const MetricSample& m) {
    std::string key(m.name);
    for (const MetricLabel& l : m.labels) {
      key += "," + std::string(l.name) + "=" + std::string(l.value);
    }
    seen[key] = m.histogram ? static_cast<double>(m.histogram->count) : m.value;
    types[std::string(m.name)] = m.type;
  });
  EXPECT_EQ(seen["kvtier_hits_blocks_total"], 4);
  EXPECT_EQ(seen["kvtier_misses_blocks_total"], 2);
  EXPECT_EQ(seen["kvtier_hits_tokens_total"], 32);
  EXPECT_EQ(seen["kvtier_misses_tokens_total"], 16);
  EXPECT_EQ(seen["kvtier_tier_capacity_bytes,tier=host,type=host"], 4 * kB);
  EXPECT_EQ(seen["kvtier_tier_capacity_bytes,tier=cold,type=host"], 8 * kB);
  EXPECT_EQ(seen["kvtier_tier_hits_blocks_total,tier=cold,type=host"], 1);
  EXPECT_EQ(seen["kvtier_moved_bytes_total,from=gpu,to=host"], 4 * kB);
  EXPECT_EQ(seen["kvtier_moved_blocks_total,from=cold,to=host"], 1);
  EXPECT_EQ(seen["kvtier_errors_total,op=load,code=not_found"], 2);
  // One block was demoted into cold, admitted by the 'always' policy.
  EXPECT_EQ(seen["kvtier_tier_admissions_total,tier=cold,type=host,result=accepted"], 1);
  EXPECT_EQ(seen["kvtier_tier_admissions_total,tier=cold,type=host,result=rejected"], 0);
  EXPECT_EQ(seen["kvtier_load_latency_seconds"], 2);
  EXPECT_EQ(types["kvtier_load_latency_seconds"], MetricType::kHistogram);
  EXPECT_EQ(types["kvtier_tier_used_bytes"], MetricType::kGauge);
  EXPECT_EQ(types["kvtier_corruptions_total"], MetricType::kCounter);
}

}  // namespace
}  // namespace kvtier::testing
