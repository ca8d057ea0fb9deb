#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvtier/config.h"

namespace kvtier {
namespace {

std::string DefaultYaml() {
  return std::string(KVTIER_SOURCE_DIR) + "/config/examples/default.yaml";
}
std::string HostYaml() { return std::string(KVTIER_SOURCE_DIR) + "/config/examples/host.yaml"; }

Result<KvtierConfig> Load(const std::string& path, std::vector<std::string> overrides) {
  return LoadConfigFile(path, overrides);
}

std::string ErrorOf(const std::string& path, std::vector<std::string> overrides) {
  Result<KvtierConfig> r = Load(path, std::move(overrides));
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(ConfigOverrideTest, TierByNameModelAndMover) {
  Result<KvtierConfig> r = Load(DefaultYaml(), {"tiers.host.capacity=8GiB", "model.layers=8",
                                                "mover.interval_ms=5", "engine.pool_blocks=64"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.tiers[0].capacity_bytes, 8 * kGiB);
  EXPECT_EQ(r->model.num_layers, 8u);
  EXPECT_EQ(r->runtime.block_bytes, 8ULL * 2 * 512 * 1 * 16 * 2);  // follows the model
  EXPECT_EQ(r->runtime.mover.interval_ms, 5u);
  EXPECT_EQ(r->gpu_pool_blocks, 64u);
}

TEST(ConfigOverrideTest, TierByNumericIndex) {
  Result<KvtierConfig> r = Load(HostYaml(), {"tiers.0.capacity=1GiB", "tiers.1.capacity=2GiB"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.tiers[0].capacity_bytes, kGiB);
  EXPECT_EQ(r->runtime.tiers[1].capacity_bytes, 2 * kGiB);
}

TEST(ConfigOverrideTest, LaterOverrideWinsAndValuesAreYaml) {
  Result<KvtierConfig> r =
      Load(HostYaml(), {"tiers.host2.watermarks.low=0.5", "tiers.host2.watermarks.low=0.6",
                        "tiers.host2.admission=[frequency, always]", "hashing.algorithm=xxh3_128",
                        "tiers.host2.watermarks={high: 0.7, low: 0.4}"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.tiers[1].watermarks.high, 0.7);
  EXPECT_EQ(r->runtime.tiers[1].watermarks.low, 0.4);
  EXPECT_EQ(r->runtime.tiers[1].admission, (std::vector<std::string>{"frequency", "always"}));
  EXPECT_EQ(r->runtime.hash, HashAlgorithm::kXxh3_128);
}

TEST(ConfigOverrideTest, CanAddKeysAndSectionsTheFileLeftOut) {
  // host.yaml has no runtime section and host2 has no watermarks.
  Result<KvtierConfig> r =
      Load(HostYaml(), {"runtime.worker_threads=7", "tiers.host2.watermarks.high=0.99"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.worker_threads, 7u);
  EXPECT_EQ(r->runtime.tiers[1].watermarks.high, 0.99);
}

TEST(ConfigOverrideTest, BadPathsNameTheOverride) {
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"tiers.nope.capacity=1GiB"}),
            "--set tiers.nope.capacity=1GiB: no tier named 'nope'; expected one of the names "
            "host or an index from 0 to 0");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"tiers.3.capacity=1GiB"}),
            "--set tiers.3.capacity=1GiB: no tier named '3'; expected one of the names host or "
            "an index from 0 to 0");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"a.b"}),
            "--set a.b: the override has no '='; expected path=value, e.g. "
            "tiers.host.capacity=8GiB");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"model..layers=3"}),
            "--set model..layers=3: override path 'model..layers' has an empty segment; "
            "expected path=value, e.g. tiers.host.capacity=8GiB");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"=3"}),
            "--set =3: override path '' has an empty segment; expected path=value, e.g. "
            "tiers.host.capacity=8GiB");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"model.layers.x=3"}),
            "--set model.layers.x=3: 'model.layers' is a single value, it has no 'x'; expected "
            "a path through maps and lists");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"tiers.host.admission.5=always"}),
            "--set tiers.host.admission.5=always: no entry '5' in 'tiers.host.admission'; "
            "expected an index from 0 to 0");
}

TEST(ConfigOverrideTest, BadValuesGoThroughTheSameChecks) {
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"tiers.host.capacity=0"}),
            "--set tiers.host.capacity=0: tiers.host.capacity is 0; expected a capacity of at "
            "least 1 byte");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"model.layers=eight"}),
            "--set model.layers=eight: model.layers is 'eight', not a whole number; expected a "
            "whole number from 1 to 4294967295");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"model.colour=red"}),
            "--set model.colour=red: unknown key 'colour' in model; expected one of: preset, id, "
            "revision, dtype, layers, kv_heads, head_size, block_tokens, tp_rank, tp_size, "
            "layout, hidden_size");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"tiers.host.capacity=[1"})
                .rfind("--set tiers.host.capacity=[1: malformed YAML: ", 0),
            0u);
  // The watermark pair is wrong because of the override, so the override is blamed even
  // though the other half of the pair comes from the file.
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"tiers.host.watermarks.high=0.5"}),
            "--set tiers.host.watermarks.high=0.5: tiers.host.watermarks: watermarks low 0.85 / "
            "high 0.5: low is not below high; expected 0 < low < high <= 1");
  EXPECT_EQ(ErrorOf(HostYaml(), {"tiers.host.type=nvme"}),
            "--set tiers.host.type=nvme: tiers.host is an nvme tier without a 'path'; "
            "expected 'path: <file or block device>'");
  EXPECT_EQ(ErrorOf(HostYaml(), {"tiers.host.type=redis"}),
            "--set tiers.host.type=redis: tiers.host is a redis tier without 'servers'; "
            "expected 'servers: [\"host:port\", ...]'");
}

TEST(ConfigOverrideTest, OutOfRangeGpuWatermarkNamesTheOverride) {
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"runtime.gpu_watermark=2"}),
            "--set runtime.gpu_watermark=2: runtime.gpu_watermark is 2.000000; expected a "
            "fraction in [0, 1)");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"runtime.gpu_watermark=-0.5"}),
            "--set runtime.gpu_watermark=-0.5: runtime.gpu_watermark is -0.500000; expected a "
            "fraction in [0, 1)");
  Result<KvtierConfig> r = Load(DefaultYaml(), {"runtime.gpu_watermark=0"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.gpu_watermark, 0.0);
}

TEST(ConfigOverrideTest, StateBlocksAreReadAndBounded) {
  Result<KvtierConfig> r = Load(DefaultYaml(), {"runtime.state_blocks=3"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.state_blocks, 3u);
  EXPECT_EQ(r->runtime.model_cost.state_bytes, 3 * r->runtime.block_bytes);
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"runtime.state_blocks=4097"})
                .rfind("--set runtime.state_blocks=4097: runtime.state_blocks", 0),
            0u)
      << ErrorOf(DefaultYaml(), {"runtime.state_blocks=4097"});
  // The hub must hold a checkpoint and its boundary block.
  const std::string small =
      ErrorOf(DefaultYaml(), {"runtime.state_blocks=4", "tiers.host.capacity=64KiB"});
  EXPECT_NE(small.find("expected a capacity of at least 5 blocks"), std::string::npos) << small;
}

// The hub too small for a state checkpoint: the override that made it so is
// named (not line 1 of the file), state_blocks first, then the capacity, then
// the model's size; without one, runtime.state_blocks where the file sets it.
TEST(ConfigOverrideTest, StateCheckpointTooLargeForTheHubNamesItsCause) {
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"runtime.state_blocks=4096"}),
            "--set runtime.state_blocks=4096: tiers.host.capacity 268435456 bytes holds 4096 "
            "blocks of the model (65536 bytes), too few for a state checkpoint of "
            "runtime.state_blocks 4096 blocks and its boundary block; expected a capacity of at "
            "least 4097 blocks (268500992 bytes), or fewer state_blocks");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"runtime.state_blocks=4", "tiers.host.capacity=64KiB"})
                .rfind("--set runtime.state_blocks=4: tiers.host.capacity 65536 bytes holds 1 ", 0),
            0u);
  const std::string file =
      "model: {preset: tiny}\nruntime: {state_blocks: 3}\n"
      "tiers: [{name: h, type: host, capacity: 1GiB}]\n";
  // The error of `text` with `overrides`, which must start with `prefix`.
  const auto expect_error = [](const std::string& text, std::vector<std::string> overrides,
                               const std::string& prefix) {
    Result<KvtierConfig> r = ParseConfig(text, "f.yaml", std::move(overrides));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message().rfind(prefix, 0), 0u) << r.status().message();
  };
  expect_error(file, {"tiers.h.capacity=512KiB"},
               "--set tiers.h.capacity=512KiB: tiers.h.capacity 524288 bytes holds 2 blocks");
  expect_error(file, {"tiers.h.capacity=768KiB", "model.layers=5"},
               "--set tiers.h.capacity=768KiB: ");
  expect_error(file, {"model.layers=8192"},  // 512 MiB blocks: 2 in 1 GiB
               "--set model.layers=8192: tiers.h.capacity 1073741824 bytes holds 2 blocks");
  expect_error(file, {"tiers.h.capacity=768KiB"}, "--set tiers.h.capacity=768KiB: ");
  Result<KvtierConfig> r =
      ParseConfig(file, "f.yaml",
                  std::vector<std::string>{"model.id=x"});  // not a size: the file's state_blocks
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  expect_error("runtime: {state_blocks: 300}\ntiers: [{name: h, type: host, capacity: 64MiB}]\n",
               {},
               "f.yaml:1:25: tiers.h.capacity 67108864 bytes holds 256 blocks of the model "
               "(262144 bytes)");
}

TEST(ConfigOverrideTest, TypeOverrideIsBlamedForKeysOfTheOldType) {
  // default.yaml's host tier sets hugepages, which an nvme tier has no use for.
  const std::string msg =
      ErrorOf(DefaultYaml(), {"tiers.host.type=nvme", "tiers.host.path=/tmp/k.dat"});
  EXPECT_EQ(
      msg.rfind("--set tiers.host.type=nvme: tiers.0: key 'hugepages' (at " + DefaultYaml() + ":",
                0),
      0u)
      << msg;
  EXPECT_NE(msg.find(") is for tiers of type host, not nvme; expected for type nvme one of: "),
            std::string::npos)
      << msg;
}

// `config explain` prints these as "" (empty = off / the default); the same
// text given back to --set must load.
TEST(ConfigOverrideTest, EmptyOptionalStringsRoundTrip) {
  Result<KvtierConfig> r = Load(
      DefaultYaml(), {"runtime.admin_socket=/tmp/kvtier-admin.sock", "runtime.admin_socket=\"\""});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.admin_socket, "");
  r = Load(DefaultYaml(), {"runtime.admin_socket="});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.admin_socket, "");
  const std::string nvme = std::string(KVTIER_SOURCE_DIR) + "/config/examples/nvme.yaml";
  r = Load(nvme, {"tiers.ssd.index_path=/tmp/i", "tiers.ssd.index_path=\"\""});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.tiers[1].nvme.index_path, "");
  const std::string redis = std::string(KVTIER_SOURCE_DIR) + "/config/examples/redis.yaml";
  r = Load(redis, {"tiers.shared.user=\"\"", "tiers.shared.password=\"\""});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.tiers[1].redis.user, "");
  EXPECT_EQ(r->runtime.tiers[1].redis.password, "");
  // Strings without an "off" value still refuse "".
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"model.id=\"\""}),
            "--set model.id=\"\": model.id is empty; expected a string");
}

TEST(ConfigOverrideTest, FileErrorsKeepFileLocationsWhenOverridesAreFine) {
  std::string msg =
      ErrorOf(DefaultYaml(), {"model.tp_size=1", "model.tp_rank=0", "tiers.host.eviction=mru"});
  // The policy library's names, whatever it adds after these.
  EXPECT_EQ(msg.rfind("--set tiers.host.eviction=mru: unknown eviction policy 'mru'; expected one "
                      "of: lru, s3fifo, flop_aware",
                      0),
            0u)
      << msg;
  Result<KvtierConfig> r = ParseConfig("tiers: [{name: h, type: host, capacity: 0}]\n", "f.yaml",
                                       std::vector<std::string>{"model.layers=3"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "f.yaml:1:41: tiers.h.capacity is 0; expected a capacity of at least 1 byte");
}

// A tier without a type accepts every backend's keys: an unknown one lists
// them once each, though backends share some (servers, connections, ...).
TEST(ConfigOverrideTest, UnknownKeyOfATierWithoutTypeListsEachKeyOnce) {
  Result<KvtierConfig> r = ParseConfig(
      "tiers:\n  - {name: host, type: host, capacity: 1GiB}\n"
      "  - {name: x, capacity: 1GiB, bogus: 1}\n",
      "f.yaml", {});
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  for (const char* key : {" servers,", " connections,", " op_timeout_ms,", " shared,"}) {
    const size_t first = msg.find(key);
    ASSERT_NE(first, std::string::npos) << key << " in " << msg;
    EXPECT_EQ(msg.find(key, first + 1), std::string::npos) << key << " twice in " << msg;
  }
}

// A tier renamed by an override onto a later tier's name: the override is
// named, not the later tier's line in the file, which the clash was found at.
TEST(ConfigOverrideTest, ADuplicateTierNameNamesTheOverride) {
  Result<KvtierConfig> r = ParseConfig(
      "tiers:\n  - {name: host, type: host, capacity: 1GiB}\n"
      "  - {name: host2, type: host, capacity: 1GiB}\n",
      "f.yaml", std::vector<std::string>{"tiers.host.name=host2"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.status().message().rfind("--set tiers.host.name=host2: duplicate tier name 'host2'", 0), 0u)
      << r.status().message();
}

// Errors across fields of the model, or between the model and a tier, name
// the override of the model's size rather than the file.
TEST(ConfigOverrideTest, ModelSizeOverridesAreBlamedForWhatTheyBreak) {
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"model.block_tokens=16777216"}),
            "--set model.block_tokens=16777216: model: model block is larger than 1 GiB (layers "
            "* planes (2, or 1 for mla) * block_tokens * kv_heads * head_size * dtype bytes); "
            "expected a block of at most 1 GiB");
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"model.layers=8193"}),
            "--set model.layers=8193: tiers.host.capacity 268435456 bytes is below one block of "
            "the model (268468224 bytes); expected a capacity of at least one block");
  // An override of the capacity itself, or of a field the size does not
  // depend on, leaves the blame where it was.
  EXPECT_EQ(ErrorOf(DefaultYaml(), {"model.layers=8193", "tiers.host.capacity=1MiB"})
                .rfind("--set tiers.host.capacity=1MiB: tiers.host.capacity 1048576 bytes", 0),
            0u);
  Result<KvtierConfig> r = ParseConfig("tiers: [{name: h, type: host, capacity: 1KiB}]\n", "f.yaml",
                                       std::vector<std::string>{"model.id=x"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("f.yaml:1:41: tiers.h.capacity 1024 bytes", 0), 0u)
      << r.status().message();
}

TEST(ConfigOverrideTest, APresetSetByOverrideIsNotShadowedByTheFilesFields) {
  // default.yaml spells out the small preset's fields: another preset set
  // by --set would keep them and only change the name.
  const std::string msg = ErrorOf(DefaultYaml(), {"model.preset=llama3-8b"});
  EXPECT_EQ(msg.rfind("--set model.preset=llama3-8b: the file's own fields override the "
                      "preset: model.id kvtier/small at ",
                      0),
            0u)
      << msg;
  for (const char* field : {"model.layers 2 at ", "(the preset's: 32)", "model.kv_heads 1 at ",
                            "model.head_size 16 at ", "model.block_tokens 512 at "}) {
    EXPECT_NE(msg.find(field), std::string::npos) << field << " in " << msg;
  }
  EXPECT_EQ(msg.find("model.dtype"), std::string::npos) << "both are fp16: " << msg;
  // A field the override sets too, or one that agrees with the preset, is fine.
  Result<KvtierConfig> r = ParseConfig(
      "model: {preset: small, layers: 32}\ntiers: [{name: h, type: host, capacity: 1GiB}]\n",
      "f.yaml", std::vector<std::string>{"model.preset=llama3-8b"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model.num_kv_heads, 8u);
  r = ParseConfig(
      "model: {preset: small, layers: 2}\ntiers: [{name: h, type: host, capacity: "
      "1GiB}]\n",
      "f.yaml", std::vector<std::string>{"model.preset=llama3-8b", "model.layers=4"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model.num_layers, 4u);
}

}  // namespace
}  // namespace kvtier
