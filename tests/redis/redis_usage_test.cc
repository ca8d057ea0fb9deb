// The Redis tier's count of its own bytes when the server answers a key's
// commands out of order: a DEL goes on the control connection and may be
// answered while a SET of the same key still waits on a data connection.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "tests/redis/redis_test_util.h"
#include "tests/redis/scripted_redis.h"
#include "tests/support/block_data.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;
using Answer = ScriptedRedis::Answer;
using Argv = std::vector<std::string>;

constexpr NamespaceId kNs{0x05e};
constexpr uint64_t kBlock = 4096;

// Write, Remove, Write of one key, the first SET answered (failed) only
// after the Remove and the second write were issued. The key is stored by
// the second write and must be counted; the first SET's failure used to
// settle the second write's record and free its bytes.
TEST(RedisUsageTest, ASetEndingAfterARemoveOfItsKeyLeavesTheNextWriteCounted) {
  std::mutex mu;
  std::condition_variable cv;
  int sets = 0;          // guarded by mu
  bool release = false;  // guarded by mu
  auto server = ScriptedRedis::Start([&](const Argv& argv) {
    Answer a;
    if (ScriptedRedis::Handshake(argv, 0, &a)) return a;
    if (argv[0] == "SET") {
      std::unique_lock lock(mu);
      if (++sets == 1) {
        cv.notify_all();
        cv.wait_for(lock, 20s, [&] { return release; });
        a.bytes = "-ERR the first write failed\r\n";
      } else {
        a.bytes = "+OK\r\n";
      }
    } else if (argv[0] == "DEL") {
      a.bytes = ":1\r\n";
    } else {
      a.bytes = "-ERR unexpected\r\n";
    }
    return a;
  });
  ASSERT_TRUE(server);
  TierOptions o = RedisTierOptionsFor({server->endpoint()}, 64 * kBlock);
  o.redis.connections = 1;
  o.redis.op_timeout_ms = 20000;  // the held SET must not time out meanwhile
  auto tier = OpenRedisTier(o, kBlock);
  ASSERT_TRUE(tier);
  const BlockKey key = TestKey(1);
  std::vector<std::byte> data = BlockBytes(key, kBlock);
  WriteOp wr{key, data};
  Completion first = tier->Write(kNs, std::span(&wr, 1));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return sets == 1; }));
  }
  Completion removed = tier->Remove(kNs, std::span(&key, 1));
  EXPECT_TRUE(removed.WaitFor(10s).ok()) << removed.status().ToString();
  EXPECT_EQ(tier->Usage().used_bytes, 0u);
  Completion second = tier->Write(kNs, std::span(&wr, 1));  // queued behind the first
  {
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  }
  EXPECT_FALSE(first.WaitFor(10s).ok());
  EXPECT_TRUE(second.WaitFor(10s).ok()) << second.status().ToString();
  const TierUsage u = tier->Usage();
  EXPECT_EQ(u.used_bytes, kBlock) << "the stored key is not counted";
  EXPECT_EQ(u.blocks, 1u);
  tier->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
