// Two runtimes, as two engine processes, over one redis-server with the same
// key prefix: a chain one saves and demotes is found by the other's lookup,
// adopted and loaded byte for byte, and counted in the adopting tier's usage;
// a block that leaves before the adopting tier is told is not counted.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/redis/redis_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {
namespace {

class RedisSharedRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    RedisServer* server = SharedRedis(&why);
    if (server == nullptr) GTEST_SKIP() << "no redis-server: " << why;
    const uint64_t bb = setup_[0].layout.BlockBytes();
    TierOptions redis = RedisTierOptionsFor({server->endpoint()}, 64 * bb);
    for (int i = 0; i < 2; ++i) {
      RuntimeOptions o = MakeOptions(bb, 8);
      o.tiers[0].watermarks = {.high = 0.2, .low = 0.1};  // a pass demotes every saved block
      o.tiers.push_back(redis);  // one key prefix: the runtimes share the blocks
      auto rt = Runtime::Open(o, setup_[i].engine);
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      rt_[i] = std::move(rt).value();
      sim_[i] = std::make_unique<SimEngine>(rt_[i].get(), setup_[i].engine.get());
    }
  }

  EngineSetup setup_[2] = {MakeEngine(64), MakeEngine(64)};
  std::unique_ptr<Runtime> rt_[2];
  std::unique_ptr<SimEngine> sim_[2];
};

TEST_F(RedisSharedRuntimeTest, AChainSavedByOneRuntimeIsLoadedByTheOther) {
  const std::vector<BlockKey> keys = ChainKeys({1, 2, 3});
  sim_[0]->Prefill(keys, 0);
  ASSERT_TRUE(sim_[0]->SaveFrom(keys, 0, 0).status().ok());
  ASSERT_EQ(*rt_[0]->TEST_RunMoverOnce(), keys.size());
  ASSERT_EQ(rt_[0]->Lookup(kTestNs, keys)->tier, (std::vector<uint8_t>{1, 1, 1}));

  // The lookup waits 50 ms for the server's answer; a sanitized build on a
  // loaded machine may miss that, and the tier is then left out for 1 s.
  Result<LookupResult> r = rt_[1]->Lookup(kTestNs, ChainKeys({1, 2, 3, 4}));
  for (int late = 0; late < 3 && r.ok() && r->hit_blocks == 0; ++late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    r = rt_[1]->Lookup(kTestNs, ChainKeys({1, 2, 3, 4}));
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tier, (std::vector<uint8_t>{1, 1, 1}));
  const RuntimeStats st = rt_[1]->Stats();
  EXPECT_EQ(st.adopted_blocks, 3u);
  EXPECT_EQ(st.tiers[1].blocks, 3u) << "the adopting runtime counts what it adopted";
  ASSERT_TRUE(sim_[1]->Load(keys, 10).status().ok());
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim_[1]->Holds(10 + i, keys[i])) << i;
}

// Both runtimes save the same keys with other bytes (KV need not be the same
// bit for bit), and the second's demotion overwrites the first's copies.
// The first read them as corrupt (its own checksum did not match), counted
// a corruption and removed the keys from the server, so the second lost
// them too. The tier checked the bytes against their own header: they load.
TEST_F(RedisSharedRuntimeTest, BlocksAnotherRuntimeSavedAgainWithOtherBytesLoad) {
  const std::vector<BlockKey> keys = ChainKeys({31, 32});
  const uint64_t bb = setup_[0].layout.BlockBytes();
  std::vector<std::vector<std::byte>> theirs;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    theirs.push_back(BlockBytes(keys[i], bb));
    for (std::byte& b : theirs.back()) b ^= std::byte{0x5a};
    ASSERT_TRUE(setup_[1].engine->WriteBlock(i, theirs.back()).ok());
  }
  sim_[0]->Prefill(keys, 0);
  ASSERT_TRUE(sim_[0]->SaveFrom(keys, 0, 0).status().ok());
  ASSERT_EQ(*rt_[0]->TEST_RunMoverOnce(), keys.size());
  const std::vector<uint32_t> blocks = {0, 1};
  ASSERT_TRUE(rt_[1]->Save(kTestNs, std::nullopt, keys, blocks).Wait().ok());
  ASSERT_EQ(*rt_[1]->TEST_RunMoverOnce(), keys.size());

  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    Completion c = sim_[r]->Load(keys, 10);
    for (uint32_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(c.result(i).ok()) << i << ": " << c.result(i).ToString();
      std::vector<std::byte> got(bb);
      ASSERT_TRUE(setup_[r].engine->ReadBlock(10 + i, got).ok());
      EXPECT_EQ(got, theirs[i]) << i;
    }
    EXPECT_EQ(rt_[r]->Stats().tiers[1].corruptions, 0u);
  }
  // The first runtime now expects the bytes it loaded: its hub copies
  // dropped, it reads them from the server again.
  ASSERT_TRUE(rt_[0]->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_[0]->Stats().tiers[0].blocks, 0u);
  Completion again = sim_[0]->Load(keys, 20);
  EXPECT_TRUE(again.status().ok()) << again.status().ToString();
  EXPECT_EQ(rt_[0]->Stats().tiers[1].corruptions, 0u);
}

// A block removed between its adoption and the Claim telling the adopting
// runtime's tier to count it would stay counted there for good (the tier
// cannot see it is gone): the runtime removes it again after the Claim.
TEST(RedisSharedRuntimeClaimTest, ABlockGoneBeforeItsClaimIsNotLeftCounted) {
  std::string why;
  RedisServer* server = SharedRedis(&why);
  if (server == nullptr) GTEST_SKIP() << "no redis-server: " << why;
  EngineSetup setup[2] = {MakeEngine(64), MakeEngine(64)};
  const uint64_t bb = setup[0].layout.BlockBytes();
  TierOptions redis = RedisTierOptionsFor({server->endpoint()}, 64 * bb);
  redis.redis.key_prefix = "claimtest";  // not the other tests' blocks
  const std::vector<BlockKey> keys = ChainKeys({21, 22, 23});
  std::shared_ptr<Tier> inner;  // runtime 1's Redis tier, behind a view
  std::unique_ptr<Runtime> rt[2];
  bool removed = false;
  for (int i = 0; i < 2; ++i) {
    RuntimeOptions o = MakeOptions(bb, 8);
    o.tiers[0].watermarks = {.high = 0.2, .low = 0.1};
    o.tiers.push_back(redis);
    if (i == 1) {
      o.tier_factory = [&](const TierOptions& t,
                           const TierContext& c) -> Result<std::unique_ptr<Tier>> {
        if (t.type != "redis") return CreateTier(t, c);
        auto made = CreateTier(t, c);
        if (!made.ok()) return made.status();
        inner = std::shared_ptr<Tier>(std::move(made).value());
        TierViewHooks hooks;
        hooks.before_claim = [&] {
          // Adopted and indexed, not yet claimed: the last block goes.
          removed = rt[1]->Remove(kTestNs, std::span(keys).last(1)).ok();
        };
        return NewTierView(inner, inner->capabilities(), std::move(hooks));
      };
    }
    auto opened = Runtime::Open(o, setup[i].engine);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    rt[i] = std::move(opened).value();
  }
  SimEngine sim(rt[0].get(), setup[0].engine.get());
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  ASSERT_EQ(*rt[0]->TEST_RunMoverOnce(), keys.size());
  // As above: a late answer leaves the tier out for 1 s.
  Result<LookupResult> r = rt[1]->Lookup(kTestNs, keys);
  for (int late = 0; late < 3 && r.ok() && r->hit_blocks == 0; ++late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    r = rt[1]->Lookup(kTestNs, keys);
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(removed);
  EXPECT_EQ(r->hit_blocks, 2u);  // the lookup answers after the claim
  // The runtime's second remove is not waited for: give its DEL time.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (inner->Usage().blocks != 2 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(inner->Usage().blocks, 2u) << "the removed block is still counted";
  for (auto& runtime : rt) runtime->Shutdown();
  ASSERT_TRUE(inner->Remove(kTestNs, keys).Wait().ok());
}

}  // namespace
}  // namespace kvtier::testing
