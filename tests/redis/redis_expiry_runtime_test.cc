// A runtime over a Redis tier with ttl_s: blocks it keeps serving from the
// hub never touch their Redis copies, whose expiry runs on. Before the hub
// lets such a block go it writes it again, once half the expiry has passed,
// so the copy Lookup and IsSaved count on is there to load.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/redis/redis_test_util.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {
namespace {

class RedisExpiryRuntime : public ::testing::Test {
 protected:
  // A hub of 8 blocks over a Redis tier with a 1 s TTL whose writes fail
  // while `fail_writes_` is set; the chain is saved, demoted, read back
  // (so it is in both tiers) and then served from the hub for 1.5 s.
  void SetUp() override {
    std::string why;
    RedisServer* server = SharedRedis(&why);
    if (server == nullptr) GTEST_SKIP() << "no redis-server: " << why;
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 8);
    o.tiers[0].watermarks = {.high = 0.2, .low = 0.1};  // a pass demotes every block
    o.tiers.push_back(RedisTierOptionsFor({server->endpoint()}, 64 * bb));
    o.tiers.back().redis.key_prefix = "expiryrt";
    o.tiers.back().redis.ttl_s = 1;
    o.tier_factory = [this](const TierOptions& t,
                            const TierContext& c) -> Result<std::unique_ptr<Tier>> {
      auto made = CreateTier(t, c);
      if (!made.ok() || t.type != "redis") return made;
      std::shared_ptr<Tier> inner = std::move(made).value();
      TierViewHooks hooks;
      hooks.before_write = [this] {
        return fail_writes_ ? Status::IOError("injected write failure") : Status::Ok();
      };
      return NewTierView(inner, inner->capabilities(), std::move(hooks));
    };
    auto opened = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    rt_ = std::move(opened).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
    sim_->Prefill(keys_, 0);
    ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
    ASSERT_EQ(*rt_->TEST_RunMoverOnce(), keys_.size());
    ASSERT_TRUE(sim_->Load(keys_, 10).status().ok());  // read back: in the hub and in Redis
    for (int i = 0; i < 6; ++i) {                      // hits from the hub, for longer than the TTL
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      ASSERT_TRUE(sim_->Load(keys_, 10).status().ok());
    }
  }
  void TearDown() override {
    if (rt_) rt_->Shutdown();
  }

  // Every block is found, said saved, and loads byte for byte.
  void ExpectLoadable() {
    ASSERT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, keys_.size());
    EXPECT_TRUE(rt_->IsSaved(kTestNs, keys_));
    sim_->Scrub(0, 64);
    Completion c = sim_->Load(keys_, 20);
    for (uint32_t i = 0; i < keys_.size(); ++i) {
      EXPECT_TRUE(c.result(i).ok()) << i << ": " << c.result(i).ToString();
      EXPECT_TRUE(sim_->Holds(20 + i, keys_[i])) << i;
    }
  }

  EngineSetup setup_ = MakeEngine(64);
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  const std::vector<BlockKey> keys_ = ChainKeys({41, 42, 43});
  std::atomic<bool> fail_writes_{false};
};

// The next mover pass drops the hub copies: it used to count on the expired
// Redis copies (Lookup found 3 blocks, IsSaved was true, the load missed
// them all); now it writes them again first.
TEST_F(RedisExpiryRuntime, BlocksServedFromTheHubAreWrittenAgainBeforeTheyCanExpire) {
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_->Stats().tiers[0].blocks, 0u);
  ExpectLoadable();
}

// A rewrite that fails keeps the hub copies (the Redis ones may be gone);
// the next pass writes them again and only then lets them go.
TEST_F(RedisExpiryRuntime, ABlockWhoseRewriteFailsStaysInTheHub) {
  fail_writes_ = true;
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, keys_.size());
  fail_writes_ = false;
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_->Stats().tiers[0].blocks, 0u);
  ExpectLoadable();
}

}  // namespace
}  // namespace kvtier::testing
