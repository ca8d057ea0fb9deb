// A Redis server that stops answering (SIGSTOP: its sockets stay open, so
// connects succeed and commands hang) costs the engine one timeout per
// connection, not one connect timeout per reconnect: once a command timed
// out, the node's jobs fail at once while its control connection tries the
// server in the background, until it answers again.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/redis/redis_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/silent_reads.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{0x78};
constexpr uint64_t kBlock = 64 * 1024;

TEST(RedisSilentTest, ReadsFailAtOnceWhileTheServerIsSilentThenItServesAgain) {
  if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint32_t timeout_ms = 300 * static_cast<uint32_t>(TimeScale());
  TierOptions o = RedisTierOptionsFor({(*server)->endpoint()}, 64 * kBlock);
  o.redis.connections = 2;
  o.redis.op_timeout_ms = timeout_ms;
  o.redis.connect_timeout_ms = timeout_ms;
  auto made = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Tier& tier = **made;
  const std::vector<std::byte> data = BlockBytes(TestKey(1), kBlock);
  std::vector<std::byte> out(kBlock);
  ReadOp r{TestKey(1), out};
  WriteAndReadOnEachConnection(tier, kNs, TestKey(1), data, r, 2);

  (*server)->Pause();
  // Before, each job after a timeout reconnected on its own thread and
  // waited a connect timeout, so most reads took a whole timeout. Each data
  // connection holds one read to its timeout at most.
  ExpectFastFailuresWhileSilent(tier, kNs, r, timeout_ms, 2, "until the server answers again");

  (*server)->Resume();
  ExpectServesAgain(tier, kNs, r, data);
  tier.Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
