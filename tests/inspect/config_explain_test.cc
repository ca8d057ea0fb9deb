// `kvtier-inspect config explain`: it lists every key the config reader
// accepts, and each value it prints reads back as the same configuration.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/config_reader.h"
#include "tests/inspect/inspect_test_util.h"
#include "tools/inspect/inspect.h"

namespace kvtier::testing {
namespace {

using nlohmann::json;

// One tier of every type, each with a knob or two off its default.
constexpr const char* kEveryType =
    "runtime: {gpu_watermark: 0.015, gpu_flops: 2.5e14}\n"
    "tiers:\n"
    "  - name: hub\n"
    "    type: host\n"
    "    capacity: 1GiB\n"
    "    watermarks: {high: 0.955, low: 0.7}\n"
    "    policy: {marconi_continue_threshold: 0.3, read_latency_us: 12.5}\n"
    "  - name: ssd\n"
    "    type: nvme\n"
    "    capacity: 2GiB\n"
    "    path: /nonexistent/kvtier-explain.dat\n"
    "    admission: [frequency, cost]\n"
    "    policy: {write_budget_per_day: 1500MiB, read_bandwidth: 2GB, reuse_spread: 0.25}\n"
    "  - name: kv\n"
    "    type: redis\n"
    "    capacity: 1GiB\n"
    "    servers: [127.0.0.1:6379, 127.0.0.1:6380]\n"
    "  - name: far\n"
    "    type: remote\n"
    "    capacity: 1GiB\n"
    "    servers: [127.0.0.1:7000]\n"
    "    secret_file: /nonexistent/secret\n"
    "    reconnect_backoff_ms: 70\n";

// key -> value of `config explain --json`.
std::map<std::string, std::string> Explain(const std::string& file,
                                           const std::vector<std::string>& overrides) {
  std::ostringstream out, err;
  inspect::Output o{out, err, /*json=*/true};
  EXPECT_EQ(inspect::RunConfigExplain(file, overrides, o), 0) << err.str();
  std::map<std::string, std::string> values;
  if (out.str().empty()) return values;
  json j = json::parse(out.str());
  for (const json& k : j["keys"]) {
    EXPECT_FALSE(k["meaning"].get<std::string>().empty()) << k;
    EXPECT_TRUE(values.emplace(k["key"], k["value"]).second) << "listed twice: " << k["key"];
  }
  return values;
}

class ConfigExplain : public ::testing::Test {
 protected:
  void SetUp() override { std::ofstream(file_) << kEveryType; }
  TempDir dir_;
  std::string file_ = dir_.File("every.yaml");
};

TEST_F(ConfigExplain, ListsEveryKeyTheReaderAccepts) {
  const std::map<std::string, std::string> values = Explain(file_, {});
  for (const std::string& k : internal::SectionKeyNames()) {
    EXPECT_EQ(values.count(k), 1u) << k;
  }
  size_t tier_keys = 0;
  for (const auto& [name, type] : {std::pair{"hub", "host"}, std::pair{"ssd", "nvme"},
                                   std::pair{"kv", "redis"}, std::pair{"far", "remote"}}) {
    for (const std::string& k : internal::TierKeyNames(type)) {
      EXPECT_EQ(values.count("tiers." + std::string(name) + "." + k), 1u) << name << " " << k;
      ++tier_keys;
    }
  }
  // Nothing beyond them but the derived block size.
  EXPECT_EQ(values.size(), internal::SectionKeyNames().size() + tier_keys + 1);
  EXPECT_EQ(values.at("(derived) block_bytes"), "262144");
}

TEST_F(ConfigExplain, PrintsValuesAsTheFileWroteThem) {
  const std::map<std::string, std::string> v = Explain(file_, {});
  EXPECT_EQ(v.at("runtime.gpu_watermark"), "0.015");
  EXPECT_EQ(v.at("runtime.gpu_flops"), "250000000000000");
  EXPECT_EQ(v.at("tiers.hub.watermarks.high"), "0.955");
  EXPECT_EQ(v.at("tiers.hub.policy.marconi_continue_threshold"), "0.3");
  EXPECT_EQ(v.at("tiers.hub.policy.read_latency_us"), "12.5");
  EXPECT_EQ(v.at("tiers.ssd.policy.write_budget_per_day"), "1572864000");
  EXPECT_EQ(v.at("tiers.ssd.policy.read_bandwidth"), "2000000000");
  EXPECT_EQ(v.at("tiers.ssd.policy.reuse_spread"), "0.25");
  EXPECT_EQ(v.at("tiers.ssd.admission"), "[frequency, cost]");
  EXPECT_EQ(v.at("tiers.kv.servers"), "[127.0.0.1:6379, 127.0.0.1:6380]");
  EXPECT_EQ(v.at("tiers.far.transport"), "tcp");
  EXPECT_EQ(v.at("tiers.far.secret_file"), "/nonexistent/secret");
  EXPECT_EQ(v.at("tiers.far.reconnect_backoff_ms"), "70");
  EXPECT_EQ(v.at("tiers.far.reconnect_backoff_max_ms"), "2000");
  EXPECT_EQ(v.at("tiers.far.policy.reuse_min_samples"), "256");
}

// Setting every listed value explicitly changes nothing: what explain shows is
// what the runtime gets, in a form the reader takes back.
TEST_F(ConfigExplain, EveryValueReadsBackUnchanged) {
  const std::map<std::string, std::string> before = Explain(file_, {});
  std::vector<std::string> overrides;
  for (const auto& [key, value] : before) {
    if (key.rfind("(derived)", 0) == 0 || key == "model.preset") continue;  // not settable
    if (key.ends_with(".name")) continue;  // renaming to itself is fine but says nothing
    overrides.push_back(key + "=" + value);
  }
  ASSERT_GT(overrides.size(), 100u);
  const std::map<std::string, std::string> after = Explain(file_, overrides);
  for (const auto& [key, value] : before) {
    EXPECT_EQ(after.count(key) ? after.at(key) : "(missing)", value) << key;
  }
  EXPECT_EQ(after.size(), before.size());
}

// Byte sizes past 2^53, which a double cannot hold exactly, print exactly
// and read back: 2^53 + 1 printed as 8PiB, 2^64 - 1 as 16384PiB (which the
// reader refuses) or, for read_bandwidth, 0B.
TEST_F(ConfigExplain, HugeByteSizesPrintExactlyAndReadBack) {
  const std::vector<std::string> huge = {"tiers.ssd.policy.write_budget_per_day=9007199254740993",
                                         "tiers.ssd.policy.write_max_per_s=18446744073709551615",
                                         "tiers.ssd.policy.read_bandwidth=18446744073709551615"};
  const std::map<std::string, std::string> v = Explain(file_, huge);
  EXPECT_EQ(v.at("tiers.ssd.policy.write_budget_per_day"), "9007199254740993");
  EXPECT_EQ(v.at("tiers.ssd.policy.write_max_per_s"), "18446744073709551615");
  EXPECT_EQ(v.at("tiers.ssd.policy.read_bandwidth"), "18446744073709551615");
  std::vector<std::string> again;
  for (const char* key : {"tiers.ssd.policy.write_budget_per_day",
                          "tiers.ssd.policy.write_max_per_s", "tiers.ssd.policy.read_bandwidth"}) {
    again.push_back(std::string(key) + "=" + v.at(key));
  }
  const std::map<std::string, std::string> back = Explain(file_, again);
  for (const std::string& o : again) {
    const std::string key = o.substr(0, o.find('='));
    EXPECT_EQ(back.at(key), v.at(key)) << key;
  }
}

}  // namespace
}  // namespace kvtier::testing
