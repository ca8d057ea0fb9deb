// The expiry of blocks in Redis (ttl_s) counts from their last use: a read
// restarts it (GETEX), so a block read often outlives ttl_s while one never
// read since its write is gone. Without ttl_s reads stay plain GETs.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/redis/redis_test_util.h"
#include "tests/support/block_data.h"
#include "tiers/redis/redis_routing.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;

constexpr NamespaceId kNs{0xE7};
constexpr uint64_t kBlock = 4096;

Status WriteBlock(Tier& tier, uint64_t i) {
  std::vector<std::byte> data = BlockBytes(TestKey(i), kBlock);
  WriteOp wr{TestKey(i), data};
  return tier.Write(kNs, std::span(&wr, 1)).Wait();
}

// Block 1 is read every 0.7 s for 2.8 s, longer than its 2 s TTL, and must
// still be there; block 2, written at the same time and never read, must be
// gone. Redis keeps the time, so the schedule is not stretched for slow
// builds: it only needs each read to end within 1.3 s of the one before.
TEST(RedisExpiry, ReadsRestartTheExpiryOfTheBlocksTheyHit) {
  if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  std::string why;
  RedisServer* server = SharedRedis(&why);
  ASSERT_NE(server, nullptr) << why;
  TierOptions o = RedisTierOptionsFor({server->endpoint()}, 16 * kBlock);
  o.redis.ttl_s = 2;
  std::unique_ptr<Tier> tier = OpenRedisTier(o, kBlock);
  ASSERT_TRUE(tier);
  const std::string hot = internal::RedisBlockKeyName(o.redis.key_prefix, kNs, TestKey(1));
  const std::string cold = internal::RedisBlockKeyName(o.redis.key_prefix, kNs, TestKey(2));
  ASSERT_TRUE(WriteBlock(*tier, 1).ok());
  ASSERT_TRUE(WriteBlock(*tier, 2).ok());
  const auto written = std::chrono::steady_clock::now();

  std::vector<std::byte> out;
  for (int k = 1; k <= 4; ++k) {
    std::this_thread::sleep_until(written + k * 700ms);
    Status st = ReadOneBlock(*tier, kNs, 1, kBlock, &out);
    ASSERT_TRUE(st.ok()) << "read " << k << " at " << k * 700 << " ms: " << st.ToString();
    ASSERT_EQ(out, BlockBytes(TestKey(1), kBlock)) << "read " << k;
    // TTL rounds to whole seconds: 2 right after a refresh; a plain GET
    // leaves 1 at the first read and the key gone by the third.
    auto ttl = server->Command({"TTL", hot});
    ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
    EXPECT_EQ(*ttl, "2") << "after read " << k;
  }
  EXPECT_EQ(ReadOneBlock(*tier, kNs, 2, kBlock, &out).code(), StatusCode::kNotFound);
  EXPECT_EQ(*server->Command({"EXISTS", cold}), "0");
  EXPECT_EQ(*server->Command({"EXISTS", hot}), "1");
  tier->Shutdown();
}

// Without ttl_s a read is a GET (any Redis version) and sets no expiry.
TEST(RedisExpiry, WithoutTtlReadsArePlainGetsAndSetNoExpiry) {
  if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  TierOptions o = RedisTierOptionsFor({(*server)->endpoint()}, 16 * kBlock);
  std::unique_ptr<Tier> tier = OpenRedisTier(o, kBlock);
  ASSERT_TRUE(tier);
  ASSERT_TRUE(WriteBlock(*tier, 1).ok());
  std::vector<std::byte> out;
  ASSERT_TRUE(ReadOneBlock(*tier, kNs, 1, kBlock, &out).ok());
  EXPECT_EQ(out, BlockBytes(TestKey(1), kBlock));
  const std::string key = internal::RedisBlockKeyName(o.redis.key_prefix, kNs, TestKey(1));
  EXPECT_EQ(*(*server)->Command({"TTL", key}), "-1");
  auto stats = (*server)->Command({"INFO", "commandstats"});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_NE(stats->find("cmdstat_get:calls=1,"), std::string::npos) << *stats;
  EXPECT_EQ(stats->find("cmdstat_getex:"), std::string::npos) << *stats;
  tier->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
