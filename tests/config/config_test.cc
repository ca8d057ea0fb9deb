#include "kvtier/config.h"

#include <gtest/gtest.h>
#include <time.h>

#include <string>
#include <vector>

#include "tests/config/config_error.h"

namespace kvtier {
namespace {

std::string Example(const std::string& name) {
  return std::string(KVTIER_SOURCE_DIR) + "/config/examples/" + name;
}

KvtierConfig MustLoad(const std::string& name) {
  Result<KvtierConfig> r = LoadConfigFile(Example(name));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : KvtierConfig{};
}

TEST(ConfigExamplesTest, DefaultYaml) {
  KvtierConfig c = MustLoad("default.yaml");
  EXPECT_EQ(c.source, Example("default.yaml"));
  EXPECT_EQ(c.model.preset, "small");
  EXPECT_EQ(c.model.model_id, "kvtier/small");
  EXPECT_EQ(c.model.revision, "main");
  EXPECT_EQ(c.model.dtype, "fp16");
  EXPECT_EQ(c.model.num_layers, 2u);
  EXPECT_EQ(c.model.num_kv_heads, 1u);
  EXPECT_EQ(c.model.head_size, 16u);
  EXPECT_EQ(c.model.block_tokens, 512u);
  EXPECT_EQ(c.model.tp_rank, 0u);
  EXPECT_EQ(c.model.tp_size, 1u);
  EXPECT_EQ(c.model.layout, KvLayoutKind::kVllmNhd);
  EXPECT_EQ(c.model.hidden_size, 0u);
  EXPECT_EQ(c.runtime.block_bytes, 64 * kKiB);
  EXPECT_EQ(c.runtime.hash, HashAlgorithm::kXxh3_128);
  EXPECT_EQ(c.gpu_pool_blocks, 512u);
  EXPECT_EQ(c.runtime.worker_threads, 3u);
  EXPECT_EQ(c.runtime.max_queued_requests, 1024u);
  EXPECT_EQ(c.runtime.mover.interval_ms, 50u);
  EXPECT_EQ(c.runtime.mover.batch_blocks, 64u);
  EXPECT_EQ(c.runtime.mover.shutdown_writeback_ms, 0u);
  ASSERT_EQ(c.runtime.tiers.size(), 1u);
  const TierOptions& t = c.runtime.tiers[0];
  EXPECT_EQ(t.name, "host");
  EXPECT_EQ(t.type, "host");
  EXPECT_EQ(t.capacity_bytes, 256 * kMiB);
  EXPECT_EQ(t.watermarks.high, 0.95);
  EXPECT_EQ(t.watermarks.low, 0.85);
  EXPECT_EQ(t.eviction, "reuse");
  EXPECT_EQ(t.admission, std::vector<std::string>{"always"});
  EXPECT_TRUE(t.hugepages);
  EXPECT_TRUE(t.mlock);
  EXPECT_EQ(t.path, "");
  EXPECT_TRUE(t.servers.empty());
  EXPECT_TRUE(c.runtime.Validate().ok());
}

TEST(ConfigExamplesTest, HostYamlHasTwoHostTiersAndExplicitModel) {
  KvtierConfig c = MustLoad("host.yaml");
  EXPECT_EQ(c.model.model_id, "example/explicit-model");
  EXPECT_EQ(c.model.revision, "v1");
  EXPECT_EQ(c.model.dtype, "bf16");
  EXPECT_EQ(c.model.num_layers, 8u);
  EXPECT_EQ(c.model.num_kv_heads, 2u);
  EXPECT_EQ(c.model.head_size, 64u);
  EXPECT_EQ(c.model.block_tokens, 32u);
  EXPECT_EQ(c.model.layout, KvLayoutKind::kVllmHnd);
  EXPECT_EQ(c.runtime.block_bytes, 128 * kKiB);
  EXPECT_EQ(c.runtime.hash, HashAlgorithm::kSha256);
  EXPECT_EQ(c.gpu_pool_blocks, 256u);
  EXPECT_EQ(c.runtime.mover.interval_ms, 10u);
  EXPECT_EQ(c.runtime.mover.batch_blocks, 16u);
  ASSERT_EQ(c.runtime.tiers.size(), 2u);
  EXPECT_EQ(c.runtime.tiers[0].name, "host");
  EXPECT_EQ(c.runtime.tiers[0].capacity_bytes, 128 * kMiB);
  EXPECT_EQ(c.runtime.tiers[0].watermarks.high, 0.9);
  EXPECT_EQ(c.runtime.tiers[0].watermarks.low, 0.7);
  EXPECT_EQ(c.runtime.tiers[0].admission, std::vector<std::string>{"always"});
  EXPECT_EQ(c.runtime.tiers[1].name, "host2");
  EXPECT_EQ(c.runtime.tiers[1].type, "host");
  EXPECT_EQ(c.runtime.tiers[1].capacity_bytes, 512 * kMiB);
  EXPECT_FALSE(c.runtime.tiers[1].hugepages);
  EXPECT_FALSE(c.runtime.tiers[1].mlock);
  EXPECT_EQ(c.runtime.tiers[1].watermarks.high, 0.95);
}

TEST(ConfigExamplesTest, NvmeRedisRemotePlaceholdersParse) {
  KvtierConfig n = MustLoad("nvme.yaml");
  EXPECT_EQ(n.model.preset, "llama3-8b");
  EXPECT_EQ(n.runtime.block_bytes, 2 * kMiB);
  ASSERT_EQ(n.runtime.tiers.size(), 2u);
  EXPECT_EQ(n.runtime.tiers[0].capacity_bytes, 8 * kGiB);
  EXPECT_EQ(n.runtime.tiers[1].type, "nvme");
  EXPECT_EQ(n.runtime.tiers[1].capacity_bytes, kTiB);
  EXPECT_EQ(n.runtime.tiers[1].path, "/mnt/nvme0/kvtier.dat");
  EXPECT_EQ(n.runtime.tiers[1].region_bytes, 64 * kMiB);
  EXPECT_EQ(n.runtime.tiers[1].watermarks.low, 0.8);
  EXPECT_EQ(n.runtime.mover.shutdown_writeback_ms, 10000u);

  KvtierConfig r = MustLoad("redis.yaml");
  EXPECT_EQ(r.model.dtype, "bf16");
  EXPECT_EQ(r.runtime.block_bytes, 917504u);
  ASSERT_EQ(r.runtime.tiers.size(), 2u);
  EXPECT_EQ(r.runtime.tiers[1].type, "redis");
  EXPECT_EQ(r.runtime.tiers[1].capacity_bytes, 64 * kGiB);
  EXPECT_EQ(r.runtime.tiers[1].servers, std::vector<std::string>{"127.0.0.1:6379"});

  KvtierConfig m = MustLoad("remote.yaml");
  ASSERT_EQ(m.runtime.tiers.size(), 2u);
  EXPECT_EQ(m.runtime.tiers[1].type, "remote");
  EXPECT_EQ(m.runtime.tiers[1].capacity_bytes, 256 * kGiB);
  EXPECT_EQ(m.runtime.tiers[1].servers,
            (std::vector<std::string>{"10.0.0.2:7400", "10.0.0.3:7400"}));
}

TEST(ParseConfigTest, MinimalConfigTakesDefaults) {
  Result<KvtierConfig> r = ParseConfig("tiers: [{name: h, type: host, capacity: 1MiB}]\n", "m");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "m");
  EXPECT_EQ(r->model.preset, "tiny");
  EXPECT_EQ(r->runtime.block_bytes, 256 * kKiB);
  EXPECT_EQ(r->gpu_pool_blocks, 512u);
  EXPECT_EQ(r->runtime.tiers[0].capacity_bytes, kMiB);
  EXPECT_EQ(r->runtime.tiers[0].admission, std::vector<std::string>{"always"});
  EXPECT_EQ(r->runtime.tiers[0].eviction, "lru");
}

TEST(ParseConfigTest, PresetFirstThenExplicitFields) {
  // Field order in the file does not matter: the preset is applied first.
  Result<KvtierConfig> r = ParseConfig(
      "model:\n  layers: 8\n  preset: llama3-8b\n  dtype: fp8\n"
      "tiers: [{name: h, type: host, capacity: 1GiB}]\n",
      "p");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model.num_layers, 8u);
  EXPECT_EQ(r->model.num_kv_heads, 8u);
  EXPECT_EQ(r->model.dtype, "fp8");
  EXPECT_EQ(r->runtime.block_bytes, 8ULL * 2 * 16 * 8 * 128 * 1);
}

TEST(ParseConfigTest, NumberAndBooleanTagsReadAsTheirValues) {
  Result<KvtierConfig> r = ParseConfig(
      "engine: {pool_blocks: !!int 64}\n"
      "tiers: [{name: h, type: host, capacity: 1MiB, mlock: !!bool false,\n"
      "         watermarks: {high: !!float 0.9, low: 0.5}}]\n",
      "g");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->gpu_pool_blocks, 64u);
  EXPECT_FALSE(r->runtime.tiers[0].mlock);
  EXPECT_EQ(r->runtime.tiers[0].watermarks.high, 0.9);
  // !!str still makes a string, as quotes do.
  EXPECT_EQ(ErrorOf("engine: {pool_blocks: !!str 64}\n"),
            "t.yaml:1:23: engine.pool_blocks is the string \"64\"; expected a whole number "
            "from 1 to 4294967295");
}

TEST(ParseConfigTest, EmptySectionsMeanDefaults) {
  Result<KvtierConfig> r = ParseConfig(
      "model:\nmover:\ntiers:\n  - {name: h, type: host, capacity: 1MiB, "
      "watermarks: }\n",
      "e");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.mover.interval_ms, 50u);
  EXPECT_EQ(r->runtime.tiers[0].watermarks.high, 0.95);
}

TEST(ParseConfigTest, ErrorsCarryExactLocationAndExpectation) {
  EXPECT_EQ(ErrorOf("tiers:\n  - name: h\n    type: host\n    capacity: 1MiB\n    mlock: 1\n"),
            "t.yaml:5:12: tiers.h.mlock is '1'; expected true or false");
  EXPECT_EQ(ErrorOf("tiers:\n  - name: h\n    type: host\n    capacity: [1]\n"),
            "t.yaml:4:15: tiers.h.capacity is a list; expected a byte size such as 512MiB");
  EXPECT_EQ(ErrorOf(""),
            "t.yaml:1:1: the configuration is empty; expected a map with at "
            "least a 'tiers' list");
  EXPECT_EQ(ErrorOf("model: {id: \"\"}\ntiers: []\n"),
            "t.yaml:1:13: model.id is empty; expected a string");
  EXPECT_EQ(ErrorOf("mover: {interval_ms: 99999999999999999999}\n"),
            "t.yaml:1:22: mover.interval_ms 99999999999999999999 is too large; expected a "
            "whole number from 1 to 3600000");
}

TEST(ParseConfigTest, SelfReferencingAliasIsRejectedNotFollowedForever) {
  std::string msg = ErrorOf("a: &x [*x]\n");
  EXPECT_NE(msg.find("nesting is deeper than 64 levels"), std::string::npos) << msg;
}

// CPU time of this thread, which a loaded machine does not inflate as it
// does wall time.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Duplicate keys are found in linear time: about 0.6 s of CPU for this map,
// where a search of the keys seen so far for each key took half a minute.
TEST(ParseConfigTest, DuplicateKeyInAHugeMapIsFoundQuickly) {
  std::string yaml;
  for (int i = 0; i < 100000; ++i) yaml += "k" + std::to_string(i) + ": 1\n";
  yaml += "k7: 2\n";
  const double start = ThreadCpuSeconds();
  const std::string msg = ErrorOf(yaml);
  const double cpu_s = ThreadCpuSeconds() - start;
  EXPECT_EQ(msg, "t.yaml:100001:1: duplicate key 'k7'; expected each key at most once per map");
  EXPECT_LT(cpu_s, 5.0);
}

// `levels` lines "name: &name [*prev, ...x10]" over a list of ten values:
// the last line expands to 10^levels values.
std::string NestedAliases(int levels) {
  std::string yaml = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (int i = 1; i < levels; ++i) {
    const std::string name = "a" + std::to_string(i);
    const std::string prev = "*a" + std::to_string(i - 1);
    yaml += name + ": &" + name + " [" + prev;
    for (int j = 1; j < 10; ++j) yaml += ", " + prev;
    yaml += "]\n";
  }
  return yaml;
}

// 10^5 values: small enough to convert without the alias budget, large
// enough to exceed it. The 8th alias on line 5 takes the copies past 100,000.
TEST(ParseConfigTest, AliasesExpandingPastTheBudgetAreRejectedAtTheAlias) {
  EXPECT_EQ(ErrorOf(NestedAliases(5)),
            "t.yaml:5:45: aliases expand to more than 100000 values; expected aliases that "
            "repeat a block a few times, not aliases of aliases that multiply it");
}

// Nine levels, 10^9 values, from a few hundred bytes: refused in bounded
// time and memory, before anything is copied.
TEST(ParseConfigTest, AliasBombIsRejectedQuickly) {
  const std::string yaml = NestedAliases(9);
  ASSERT_LT(yaml.size(), 1000u);
  const double start = ThreadCpuSeconds();
  const std::string msg = ErrorOf(yaml);
  const double cpu_s = ThreadCpuSeconds() - start;
  EXPECT_NE(msg.find("aliases expand to more than 100000 values"), std::string::npos) << msg;
  EXPECT_LT(cpu_s, 5.0);
  // The same through an override.
  const std::vector<std::string> overrides = {"model=" + yaml};
  Result<KvtierConfig> r =
      ParseConfig("tiers: [{name: h, type: host, capacity: 1MiB}]\n", "t", overrides);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--set model="), std::string::npos);
  EXPECT_NE(r.status().message().find("aliases expand"), std::string::npos);
}

TEST(ParseConfigTest, GarbageInputNeverCrashes) {
  const char* inputs[] = {"\t",
                          "[",
                          "{",
                          "- - -",
                          ":",
                          "\xff\xfe",
                          "a: b: c",
                          "!!binary x",
                          "? [a]\n: b\n",
                          "tiers: *nope",
                          "%YAML 9.9\n---\n",
                          "'",
                          "\"\\q\""};
  for (const char* in : inputs) {
    Result<KvtierConfig> r = ParseConfig(in, "g");
    EXPECT_FALSE(r.ok()) << in;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << in;
    EXPECT_EQ(r.status().message().rfind("g:", 0), 0u) << r.status().message();
  }
}

}  // namespace
}  // namespace kvtier
