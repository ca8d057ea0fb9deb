// Upper bounds of the runtime's numeric options and the tier names and sizes
// it refuses: RuntimeOptions::Validate (every caller) and the config reader
// (which reports them at the offending value).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "kvtier/config.h"
#include "kvtier/options.h"
#include "tests/config/config_error.h"

namespace kvtier {
namespace {

constexpr uint32_t kU32Max = std::numeric_limits<uint32_t>::max();

std::string Message(const Status& s) { return std::string(s.message()); }

TierOptions HostTier(const std::string& name, uint64_t capacity_bytes = 64 * kMiB) {
  TierOptions t;
  t.name = name;
  t.type = "host";
  t.capacity_bytes = capacity_bytes;
  return t;
}

RuntimeOptions ValidRuntime() {
  RuntimeOptions r;
  r.block_bytes = 256 * kKiB;
  r.tiers.push_back(HostTier("host"));
  return r;
}

// A host tier of 1 GiB, then `rest` (more keys or sections).
std::string WithHost(std::string_view rest) {
  return std::string(rest) + "tiers:\n  - name: host\n    type: host\n    capacity: 1GiB\n";
}

TEST(OptionsBoundsTest, WorkerThreadsAreOneTo256) {
  RuntimeOptions r = ValidRuntime();
  r.worker_threads = 256;
  EXPECT_TRUE(r.Validate().ok());
  r.worker_threads = 257;
  EXPECT_EQ(Message(r.Validate()), "worker_threads 257 is too many; expected 1 to 256");
  r.worker_threads = kU32Max;
  EXPECT_EQ(r.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(r.Validate()), "worker_threads 4294967295 is too many; expected 1 to 256");
}

TEST(OptionsBoundsTest, MoverIntervalIsOneMsToOneHour) {
  RuntimeOptions r = ValidRuntime();
  for (uint64_t ok : {uint64_t{1}, uint64_t{3600000}}) {
    r.mover.interval_ms = ok;
    EXPECT_TRUE(r.Validate().ok()) << ok;
  }
  for (uint64_t bad : {uint64_t{0}, uint64_t{3600001}, std::numeric_limits<uint64_t>::max()}) {
    r.mover.interval_ms = bad;
    EXPECT_EQ(Message(r.Validate()), "mover interval_ms " + std::to_string(bad) +
                                         " is out of range; expected 1 to 3600000");
  }
}

TEST(OptionsBoundsTest, ShutdownWritebackIsOffToOneHour) {
  RuntimeOptions r = ValidRuntime();
  for (uint64_t ok : {uint64_t{0}, uint64_t{3600000}}) {
    r.mover.shutdown_writeback_ms = ok;
    EXPECT_TRUE(r.Validate().ok()) << ok;
  }
  for (uint64_t bad : {uint64_t{3600001}, std::numeric_limits<uint64_t>::max()}) {
    r.mover.shutdown_writeback_ms = bad;
    EXPECT_EQ(Message(r.Validate()), "mover shutdown_writeback_ms " + std::to_string(bad) +
                                         " is out of range; expected 0 (off) to 3600000");
  }
}

TEST(OptionsBoundsTest, MoverBatchIsWithinTheTiersBatchLimit) {
  RuntimeOptions r = ValidRuntime();
  r.mover.batch_blocks = 4096;
  EXPECT_TRUE(r.Validate().ok());
  r.mover.batch_blocks = 4097;
  EXPECT_EQ(Message(r.Validate()),
            "mover batch_blocks 4097 exceeds the tiers' batch limit; expected 1 to 4096");
  r.mover.batch_blocks = kU32Max;
  EXPECT_EQ(r.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(OptionsBoundsTest, EveryTierHoldsAtLeastOneBlock) {
  RuntimeOptions r = ValidRuntime();
  r.tiers.push_back(HostTier("lower", r.block_bytes));
  EXPECT_TRUE(r.Validate().ok());
  r.tiers[1].capacity_bytes = r.block_bytes - 1;
  EXPECT_EQ(Message(r.Validate()),
            "tier 'lower': capacity 262143 bytes is below one block of 262144 bytes; expected a "
            "capacity of at least one block");
  // Whatever the type: the check does not depend on the backend.
  r.tiers[1].type = "redis";
  r.tiers[1].servers = {"127.0.0.1:6379"};
  EXPECT_NE(Message(r.Validate()).find("below one block"), std::string::npos)
      << Message(r.Validate());
  r = ValidRuntime();
  r.tiers[0].capacity_bytes = 4096;
  EXPECT_EQ(Message(r.Validate()),
            "tier 'host': capacity 4096 bytes is below one block of 262144 bytes; expected a "
            "capacity of at least one block");
}

// A host tier numbers its slots in 32 bits: a capacity past that is refused
// by validation (kvtier-inspect config validate), not first at open.
TEST(OptionsBoundsTest, AHostTierHoldsAtMostUint32MaxMinusOneBlocks) {
  RuntimeOptions r = ValidRuntime();
  r.tiers[0].capacity_bytes = (kU32Max - 1) * r.block_bytes;
  EXPECT_TRUE(r.Validate().ok()) << Message(r.Validate());
  r.tiers[0].capacity_bytes += r.block_bytes;
  EXPECT_EQ(Message(r.Validate()),
            "tier 'host': capacity 1125899906580480 bytes is 4294967295 blocks of 262144 bytes; "
            "expected at most 4294967294 blocks in one host tier");
}

TEST(OptionsBoundsTest, GpuIsNotATierName) {
  TierOptions t = HostTier("gpu");
  EXPECT_EQ(Message(t.Validate()),
            "tier 'gpu': name is reserved for the engine's GPU pool; expected another tier name");
  RuntimeOptions r = ValidRuntime();
  r.tiers.push_back(HostTier("gpu"));
  EXPECT_EQ(r.Validate().code(), StatusCode::kInvalidArgument);
  r.tiers[1].name = "gpu0";  // only the exact name is reserved
  EXPECT_TRUE(r.Validate().ok()) << Message(r.Validate());
}

TEST(OptionsBoundsTest, SketchWidthIsAtMost2To24) {
  PolicyKnobs k;
  k.sketch_width = 1u << 24;
  EXPECT_TRUE(k.Validate().ok());
  k.sketch_width = (1u << 24) + 1;
  EXPECT_EQ(Message(k.Validate()),
            "sketch_width 16777217 is too wide; expected at most 16777216 counters per row");
  RuntimeOptions r = ValidRuntime();
  r.tiers[0].admission = {"frequency"};
  r.tiers[0].policy.sketch_width = kU32Max;
  EXPECT_EQ(Message(r.Validate()),
            "tier 'host': policy sketch_width 4294967295 is too wide; expected at most 16777216 "
            "counters per row");
}

TEST(OptionsBoundsTest, ConfigReportsEachBoundAtItsValue) {
  EXPECT_EQ(ErrorOf(WithHost("runtime:\n  worker_threads: 4294967295\n")),
            "t.yaml:2:19: runtime.worker_threads is 4294967295, out of range; expected a whole "
            "number from 1 to 256");
  EXPECT_EQ(ErrorOf(WithHost("mover:\n  batch_blocks: 4097\n")),
            "t.yaml:2:17: mover.batch_blocks is 4097, out of range; expected a whole number from "
            "1 to 4096");
  EXPECT_EQ(ErrorOf("tiers:\n  - name: host\n    type: host\n    capacity: 1GiB\n"
                    "    policy: {sketch_width: 4294967295}\n"),
            "t.yaml:5:28: tiers.host.policy.sketch_width is 4294967295, out of range; expected a "
            "whole number from 16 to 16777216");
  EXPECT_EQ(ErrorOf("tiers:\n  - name: gpu\n    type: host\n    capacity: 1GiB\n"),
            "t.yaml:2:11: tier name 'gpu' is reserved for the engine's GPU pool; expected another "
            "name, e.g. 'name: host'");
  // The "tiny" model's block is 256 KiB.
  EXPECT_EQ(ErrorOf(WithHost("") + "  - name: ssd\n    type: redis\n    capacity: 1KiB\n"
                                   "    servers: [\"127.0.0.1:6379\"]\n"),
            "t.yaml:7:15: tiers.ssd.capacity 1024 bytes is below one block of the model (262144 "
            "bytes); expected a capacity of at least one block");
}

TEST(OptionsBoundsTest, ConfigAcceptsTheLimitsThemselves) {
  Result<KvtierConfig> r = ParseConfig(
      WithHost("runtime: {worker_threads: 256}\nmover: {interval_ms: 3600000, batch_blocks: "
               "4096}\n"),
      "t.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.worker_threads, 256u);
  EXPECT_EQ(r->runtime.mover.batch_blocks, 4096u);
}

}  // namespace
}  // namespace kvtier
