// A runtime over a Redis tier with ttl_s: blocks it keeps serving from the
// hub never touch their Redis copies, whose expiry runs on. Before the hub
// lets such a block go it writes it again, once half the expiry has passed,
// so the copy Lookup and IsSaved count on is there to load.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/redis/redis_test_util.h"

namespace kvtier::testing {
namespace {

// A chain demoted to Redis (TTL 1 s), read back into the hub, then served
// from the hub for 1.5 s. The next mover pass drops the hub copies: it used
// to count on the expired Redis copies (Lookup found 3 blocks, IsSaved was
// true, the load missed them all); now it writes them again first.
TEST(RedisExpiryRuntime, BlocksServedFromTheHubAreWrittenAgainBeforeTheyCanExpire) {
  std::string why;
  RedisServer* server = SharedRedis(&why);
  if (server == nullptr) GTEST_SKIP() << "no redis-server: " << why;
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 8);
  o.tiers[0].watermarks = {.high = 0.2, .low = 0.1};  // a pass demotes every block
  o.tiers.push_back(RedisTierOptionsFor({server->endpoint()}, 64 * bb));
  o.tiers.back().redis.key_prefix = "expiryrt";
  o.tiers.back().redis.ttl_s = 1;
  auto opened = Runtime::Open(o, setup.engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Runtime> rt = std::move(opened).value();
  SimEngine sim(rt.get(), setup.engine.get());

  const std::vector<BlockKey> keys = ChainKeys({41, 42, 43});
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  ASSERT_EQ(*rt->TEST_RunMoverOnce(), keys.size());
  ASSERT_TRUE(sim.Load(keys, 10).status().ok());  // read back: in the hub and in Redis
  for (int i = 0; i < 6; ++i) {  // hits from the hub, for longer than the TTL
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    ASSERT_TRUE(sim.Load(keys, 10).status().ok());
  }
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt->Stats().tiers[0].blocks, 0u);
  ASSERT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, keys.size());
  EXPECT_TRUE(rt->IsSaved(kTestNs, keys));
  sim.Scrub(0, 64);
  Completion c = sim.Load(keys, 20);
  for (uint32_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(c.result(i).ok()) << i << ": " << c.result(i).ToString();
    EXPECT_TRUE(sim.Holds(20 + i, keys[i])) << i;
  }
  rt->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
