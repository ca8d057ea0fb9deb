// The Prometheus and JSON renderings, byte for byte.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "kvtier/metrics.h"
#include "kvtier/runtime.h"

namespace kvtier {
namespace {

TEST(PrometheusText, GroupsFamiliesAndEscapes) {
  PrometheusTextWriter w;
  const std::array<MetricLabel, 1> a = {{{"tier", "a\"b\\c\nd"}}};
  const std::array<MetricLabel, 1> b = {{{"tier", "host"}}};
  w.Add({"x_total", "first\\help\nline", MetricType::kCounter, a, 3, nullptr});
  w.Add({"y_bytes", "a gauge", MetricType::kGauge, {}, 1.5, nullptr});
  w.Add({"x_total", "ignored: the first help wins", MetricType::kCounter, b, 4, nullptr});
  const std::array<double, 2> bounds = {0.001, 0.5};
  const std::array<uint64_t, 2> cumulative = {1, 3};
  HistogramSample h{bounds, cumulative, 0.25, 4};
  w.Add({"z_seconds", "latency", MetricType::kHistogram, b, 0, &h});
  EXPECT_EQ(w.Text(),
            "# HELP x_total first\\\\help\\nline\n"
            "# TYPE x_total counter\n"
            "x_total{tier=\"a\\\"b\\\\c\\nd\"} 3\n"
            "x_total{tier=\"host\"} 4\n"
            "# HELP y_bytes a gauge\n"
            "# TYPE y_bytes gauge\n"
            "y_bytes 1.5\n"
            "# HELP z_seconds latency\n"
            "# TYPE z_seconds histogram\n"
            "z_seconds_bucket{tier=\"host\",le=\"0.001\"} 1\n"
            "z_seconds_bucket{tier=\"host\",le=\"0.5\"} 3\n"
            "z_seconds_bucket{tier=\"host\",le=\"+Inf\"} 4\n"
            "z_seconds_sum{tier=\"host\"} 0.25\n"
            "z_seconds_count{tier=\"host\"} 4\n");
}

RuntimeStats SmallStats() {
  RuntimeStats s;
  s.lookups = 2;
  s.lookup_blocks = 10;
  s.lookup_hit_blocks = 7;
  s.block_tokens = 16;
  TierStats host;
  host.name = "host";
  host.type = "host";
  host.capacity_bytes = 1 << 20;
  host.used_bytes = 4096;
  host.blocks = 1;
  s.tiers.push_back(host);
  s.moves.push_back({"gpu", "host", 1, 4096});
  s.errors.push_back({"load", StatusCode::kDeadlineExceeded, 2});
  s.load_latency.upper_bounds_s = {0.001, 0.01};
  s.load_latency.bucket_counts = {1, 0, 1};
  s.load_latency.count = 2;
  s.load_latency.sum_s = 0.5;
  return s;
}

TEST(PrometheusText, RuntimeStatsExposition) {
  const std::string text = RenderPrometheusText(SmallStats());
  for (const char* line : {
           "kvtier_hits_blocks_total 7\n",
           "kvtier_misses_blocks_total 3\n",
           "kvtier_hits_tokens_total 112\n",
           "kvtier_misses_tokens_total 48\n",
           "kvtier_tier_capacity_bytes{tier=\"host\",type=\"host\"} 1048576\n",
           "kvtier_tier_used_bytes{tier=\"host\",type=\"host\"} 4096\n",
           "kvtier_tier_unclaimed_blocks{tier=\"host\",type=\"host\"} 0\n",
           "kvtier_tier_admissions_total{tier=\"host\",type=\"host\",result=\"rejected\"} 0\n",
           "kvtier_moved_bytes_total{from=\"gpu\",to=\"host\"} 4096\n",
           "kvtier_errors_total{op=\"load\",code=\"deadline_exceeded\"} 2\n",
           "kvtier_load_latency_seconds_bucket{le=\"0.001\"} 1\n",
           "kvtier_load_latency_seconds_bucket{le=\"0.01\"} 1\n",
           "kvtier_load_latency_seconds_bucket{le=\"+Inf\"} 2\n",
           "kvtier_load_latency_seconds_sum 0.5\n",
           "kvtier_load_latency_seconds_count 2\n",
           "# TYPE kvtier_save_latency_seconds histogram\n",
           "kvtier_save_latency_seconds_count 0\n",
       }) {
    EXPECT_NE(text.find(std::string("\n") + line), std::string::npos) << line;
  }
}

// The exposition grammar, strictly: comment lines are HELP or TYPE, each once
// per family and before its samples; sample lines are
// name{label="value",...} number; names and label names are valid; a
// counter's name ends in _total; a histogram has _bucket/_sum/_count only.
TEST(PrometheusText, StrictGrammar) {
  const std::string text = RenderPrometheusText(SmallStats());
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) [^\n]*)");
  const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*"(,[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*")*\})? (-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?|\+Inf|NaN))");
  std::istringstream in(text);
  std::string line, family, family_type;
  std::set<std::string> families;
  int samples = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      family = m[1];
      EXPECT_TRUE(families.insert(family).second) << "family twice: " << family;
      ASSERT_TRUE(std::getline(in, line));
      ASSERT_TRUE(std::regex_match(line, m, type)) << line;
      EXPECT_EQ(m[1], family);
      family_type = m[2];
      if (family_type == "counter") EXPECT_TRUE(family.ends_with("_total")) << family;
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, sample)) << "bad line: " << line;
    const std::string name = m[1];
    ++samples;
    if (family_type == "histogram") {
      EXPECT_TRUE(name == family + "_bucket" || name == family + "_sum" ||
                  name == family + "_count")
          << name;
    } else {
      EXPECT_EQ(name, family);
    }
  }
  EXPECT_GE(families.size(), 30u);
  EXPECT_GT(samples, 40);
}

// Every counter of RuntimeStats is in both renderings.
TEST(StatsJson, AdoptedAndNotAdmittedBlocksAreRendered) {
  RuntimeStats s = SmallStats();
  s.adopted_blocks = 11;
  s.save_not_admitted = 5;
  auto j = nlohmann::json::parse(RenderStatsJson(s));
  EXPECT_EQ(j["adopted_blocks"], 11);
  EXPECT_EQ(j["save_not_admitted"], 5);
  const std::string text = RenderPrometheusText(s);
  EXPECT_NE(
      text.find("\n# TYPE kvtier_adopted_blocks_total counter\nkvtier_adopted_blocks_total 11\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("\nkvtier_save_not_admitted_blocks_total 5\n"), std::string::npos) << text;
}

TEST(StatsJson, ParsesAndKeepsEveryField) {
  const std::string text = RenderStatsJson(SmallStats());
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["lookup_hit_blocks"], 7);
  EXPECT_EQ(j["block_tokens"], 16);
  EXPECT_EQ(j["tiers"][0]["name"], "host");
  EXPECT_EQ(j["tiers"][0]["capacity_bytes"], 1048576);
  EXPECT_EQ(j["tiers"][0]["forced_blocks"], 0);
  EXPECT_EQ(j["tiers"][0]["unclaimed_blocks"], 0);
  EXPECT_EQ(j["tiers"][0]["unclaimed_bytes"], 0);
  EXPECT_EQ(j["tiers"][0].size(), 19u);
  EXPECT_EQ(j["moves"][0], nlohmann::json({{"from", "gpu"}, {"to", "host"}, {"blocks", 1},
                                           {"bytes", 4096}}));
  EXPECT_EQ(j["errors"][0]["code"], "deadline_exceeded");
  EXPECT_EQ(j["load_latency"]["bucket_counts"], nlohmann::json({1, 0, 1}));
  EXPECT_EQ(j["load_latency"]["sum_s"], 0.5);
  EXPECT_EQ(j["save_latency"]["count"], 0);
  // Names with quotes and control characters stay valid JSON.
  RuntimeStats odd;
  odd.tiers.push_back(TierStats{.name = "a\"b\\\n\x01"});
  EXPECT_EQ(nlohmann::json::parse(RenderStatsJson(odd))["tiers"][0]["name"], "a\"b\\\n\x01");
}

}  // namespace
}  // namespace kvtier
