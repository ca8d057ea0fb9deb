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
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;
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
  WriteOp w{TestKey(1), data};
  ASSERT_TRUE(tier.Write(kNs, std::span(&w, 1)).Wait().ok());
  std::vector<std::byte> out(kBlock);
  ReadOp r{TestKey(1), out};
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(tier.Read(kNs, std::span(&r, 1)).Wait().ok());

  (*server)->Pause();
  // Several reconnect cycles long. Before, each job after a timeout
  // reconnected on its own thread and waited a connect timeout (or the
  // backoff's fast failure), so most reads took a whole timeout.
  const auto window = std::chrono::milliseconds(timeout_ms * 8);
  const auto slow = std::chrono::milliseconds(timeout_ms / 3);
  const auto start = Clock::now();
  int reads = 0, slow_reads = 0;
  Status last;
  while (Clock::now() - start < window) {
    const auto t0 = Clock::now();
    Completion c = tier.Read(kNs, std::span(&r, 1));
    ASSERT_TRUE(c.WaitFor(std::chrono::milliseconds(timeout_ms * 3)).ok() || c.Poll());
    last = c.result(0);
    ASSERT_FALSE(last.ok()) << "a paused server served a read";
    ++reads;
    slow_reads += Clock::now() - t0 >= slow ? 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Each data connection holds one read to its timeout at most.
  EXPECT_LE(slow_reads, 2) << "of " << reads << " reads";
  EXPECT_GE(reads - slow_reads, 20);
  EXPECT_EQ(last.code(), StatusCode::kUnavailable) << last.ToString();
  EXPECT_NE(last.message().find("until the server answers again"), std::string::npos)
      << last.ToString();

  (*server)->Resume();
  const auto until = Clock::now() + Scaled(std::chrono::seconds(5));
  Status st;
  do {
    std::fill(out.begin(), out.end(), std::byte{0});
    st = tier.Read(kNs, std::span(&r, 1)).Wait();
    if (!st.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (!st.ok() && Clock::now() < until);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out, data);
  tier.Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
