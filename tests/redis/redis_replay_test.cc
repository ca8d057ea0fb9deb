// config/examples/host-redis.yaml through kvtier-bench's replay, against a
// redis-server started here: the Redis tier must add hits over the host tier
// alone, and every loaded byte must verify.
#include <gtest/gtest.h>

#include "kvtier/config.h"
#include "tests/support/redis_server.h"
#include "tools/bench/replay.h"
#include "tools/bench/synthetic.h"

namespace kvtier::testing {
namespace {

TEST(RedisReplay, HostRedisExampleBeatsHostAlone) {
  if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string servers = "tiers.redis.servers=[\"" + (*server)->endpoint() + "\"]";
  auto config = LoadConfigFile(KVTIER_SOURCE_DIR "/config/examples/host-redis.yaml",
                               std::vector<std::string>{servers});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->runtime.tiers.size(), 2u);
  auto trace = bench::GenerateSyntheticTrace(bench::SyntheticOptions{});
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();

  bench::ReplayOptions options;
  auto with_redis = bench::ReplayTrace(*config, *trace, options);
  ASSERT_TRUE(with_redis.ok()) << with_redis.status().ToString();
  KvtierConfig host_only = *config;
  host_only.runtime.tiers.resize(1);
  auto alone = bench::ReplayTrace(host_only, *trace, options);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();

  EXPECT_EQ(with_redis->verify_failures, 0u);
  EXPECT_EQ(alone->verify_failures, 0u);
  EXPECT_GT(with_redis->block_hits, alone->block_hits);
  const TierStats& redis = with_redis->runtime.tiers[1];
  EXPECT_EQ(redis.type, "redis");
  EXPECT_GT(redis.hit_blocks, 0u);
  EXPECT_EQ(redis.errors, 0u);
  EXPECT_EQ(redis.corruptions, 0u);
  std::cout << "block hits: host+redis " << with_redis->block_hits << ", host alone "
            << alone->block_hits << ", of " << with_redis->blocks << " (infinite cache "
            << with_redis->infinite.hit_blocks << ")\n";
}

}  // namespace
}  // namespace kvtier::testing
