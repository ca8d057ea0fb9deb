// config/examples/host-remote.yaml through kvtier-bench's replay against two
// kvtier-memd processes started here: the remote tier must add hits over the
// host tier alone, and every loaded byte must verify.
#include <gtest/gtest.h>

#include "kvtier/config.h"
#include "tests/support/memd_server.h"
#include "tools/bench/replay.h"
#include "tools/bench/synthetic.h"

namespace kvtier::testing {
namespace {

TEST(RemoteReplay, HostRemoteExampleBeatsHostAlone) {
  MemdProcessOptions mo;
  mo.pool_size = "256MiB";
  mo.slot_size = "260KiB";
  auto a = MemdProcess::Start(mo);
  auto b = MemdProcess::Start(mo);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << " " << b.status().ToString();
  const std::vector<std::string> overrides = {
      "tiers.remote.servers=[\"" + (*a)->endpoint() + "\", \"" + (*b)->endpoint() + "\"]",
      "tiers.remote.secret_file=" + (*a)->secret_file()};
  auto config = LoadConfigFile(KVTIER_SOURCE_DIR "/config/examples/host-remote.yaml", overrides);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->runtime.tiers.size(), 2u);
  auto trace = bench::GenerateSyntheticTrace(bench::SyntheticOptions{});
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();

  bench::ReplayOptions options;
  // Deadlines are tested elsewhere; here a loaded CI machine must not turn
  // a slow load into a failure.
  options.timeout_ms = 30000;
  auto with_remote = bench::ReplayTrace(*config, *trace, options);
  ASSERT_TRUE(with_remote.ok()) << with_remote.status().ToString();
  KvtierConfig host_only = *config;
  host_only.runtime.tiers.resize(1);
  auto alone = bench::ReplayTrace(host_only, *trace, options);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();

  EXPECT_EQ(with_remote->verify_failures, 0u);
  std::string errors;
  for (const ErrorStats& e : with_remote->runtime.errors) {
    errors += e.op + ":" + std::string(StatusCodeName(e.code)) + "=" + std::to_string(e.blocks) + " ";
  }
  EXPECT_EQ(with_remote->load_failures, 0u) << errors;
  EXPECT_EQ(with_remote->save_failures, 0u);
  EXPECT_GT(with_remote->block_hits, alone->block_hits);
  const TierStats& remote = with_remote->runtime.tiers[1];
  EXPECT_EQ(remote.type, "remote");
  EXPECT_GT(remote.hit_blocks, 0u);
  EXPECT_EQ(remote.errors, 0u);
  EXPECT_EQ(remote.corruptions, 0u);
  std::cout << "block hits: host+remote " << with_remote->block_hits << ", host alone "
            << alone->block_hits << ", of " << with_remote->blocks << " (infinite cache "
            << with_remote->infinite.hit_blocks << ")\n";
}

}  // namespace
}  // namespace kvtier::testing
