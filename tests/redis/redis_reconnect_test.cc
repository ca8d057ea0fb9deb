// The Redis tier finding its way back to a server: a connection the server
// closed while it sat idle (its timeout, a restart, a proxy's idle limit) must
// not cost the next job, whose commands are sent again on a new connection.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/redis/redis_test_util.h"
#include "tests/redis/scripted_redis.h"
#include "tests/support/block_data.h"
#include "tiers/redis/redis_connection.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;
using Answer = ScriptedRedis::Answer;
using Argv = std::vector<std::string>;

constexpr NamespaceId kNs{0x5E7};
constexpr uint64_t kBlock = 4096;

// One read of block i into *out; the status it ended with, or DeadlineExceeded.
Status ReadOne(Tier& tier, uint64_t i, std::vector<std::byte>* out) {
  return ReadOneBlock(tier, kNs, i, kBlock, out);
}

// The server drops every client connection between two jobs: the next read
// must succeed at its first attempt, on a new connection.
TEST(RedisReconnect, ConnectionTheServerClosedWhileIdleIsReplaced) {
  if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  TierOptions o = RedisTierOptionsFor({(*server)->endpoint()}, 16 * kBlock);
  o.redis.connections = 1;
  o.redis.op_timeout_ms = 500;
  o.redis.connect_timeout_ms = 500;
  auto tier = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  std::vector<std::byte> data = BlockBytes(TestKey(1), kBlock);
  WriteOp wr{TestKey(1), data};
  ASSERT_TRUE((*tier)->Write(kNs, std::span(&wr, 1)).Wait().ok());
  for (int round = 0; round < 3; ++round) {
    auto killed = (*server)->Command({"CLIENT", "KILL", "TYPE", "normal"});
    ASSERT_TRUE(killed.ok()) << killed.status().ToString();
    ASSERT_EQ(*killed, "1") << "the tier's one connection is killed";
    std::vector<std::byte> out;
    const Status st = ReadOne(**tier, 1, &out);
    ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.ToString();
    EXPECT_EQ(out, data);
  }
  (*tier)->Shutdown();
}

// An idle connection knows, without blocking, whether the server is still at
// the other end.
TEST(RedisReconnect, IdleConnectionSeesTheServerClose) {
  auto closing = std::make_shared<std::atomic<bool>>(false);
  auto server = ScriptedRedis::Start([closing](const Argv& argv) {
    Answer a;
    if (ScriptedRedis::Handshake(argv, 0, &a)) a.close = closing->load();
    return a;
  });
  ASSERT_TRUE(server);
  const internal::RedisEndpoint ep{"127.0.0.1", server->port()};
  RedisTierOptions o;
  o.connect_timeout_ms = 500;
  auto open = internal::RedisConnection::Open(ep, o, nullptr);
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_TRUE((*open)->Reusable());
  EXPECT_TRUE((*open)->Reusable()) << "looking does not consume anything";

  closing->store(true);  // this one is closed right after its PING is answered
  auto closed = internal::RedisConnection::Open(ep, o, nullptr);
  ASSERT_TRUE(closed.ok()) << closed.status().ToString();
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while ((*closed)->Reusable() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE((*closed)->broken());
  EXPECT_TRUE((*closed)->closed_by_peer());
  EXPECT_TRUE((*open)->Reusable());
}

// A scripted server that closes the connection on each of the first `closes`
// GETs it gets, before answering, and answers later ones with a miss.
std::unique_ptr<ScriptedRedis> ClosingOnGet(std::shared_ptr<std::atomic<int>> gets, int closes) {
  return ScriptedRedis::Start([gets, closes](const Argv& argv) {
    Answer a;
    if (ScriptedRedis::Handshake(argv, 0, &a)) return a;
    if (argv[0] == "GET" && gets->fetch_add(1) < closes) {
      a.close = true;
    } else {
      a.bytes = "$-1\r\n";
    }
    return a;
  });
}

std::unique_ptr<Tier> OpenOn(const ScriptedRedis& server) {
  TierOptions o = RedisTierOptionsFor({server.endpoint()}, 16 * kBlock);
  o.redis.connections = 1;
  o.redis.op_timeout_ms = 500;
  o.redis.connect_timeout_ms = 500;
  auto t = MakeRedisTier(o, kBlock);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// A close the idle check cannot see yet (here: the server closes as the job
// arrives, before answering) costs the job nothing either: it is sent again,
// once, on a new connection.
TEST(RedisReconnect, JobOnAConnectionClosedBeforeAnyReplyIsReplayedOnce) {
  auto gets = std::make_shared<std::atomic<int>>(0);
  auto server = ClosingOnGet(gets, 1);
  ASSERT_TRUE(server);
  auto tier = OpenOn(*server);
  ASSERT_TRUE(tier);
  std::vector<std::byte> out;
  const Status st = ReadOne(*tier, 1, &out);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(gets->load(), 2);
  EXPECT_EQ(server->accepted(), 2);
  tier->Shutdown();
}

// A server that closes on every job is not retried without end: the replay
// on a fresh connection is the last attempt.
TEST(RedisReconnect, ReplayIsNotRepeatedOnAFreshConnection) {
  auto gets = std::make_shared<std::atomic<int>>(0);
  auto server = ClosingOnGet(gets, 1000);
  ASSERT_TRUE(server);
  auto tier = OpenOn(*server);
  ASSERT_TRUE(tier);
  std::vector<std::byte> out;
  const Status st = ReadOne(*tier, 1, &out);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("connection closed by the server"), std::string_view::npos)
      << st.ToString();
  EXPECT_EQ(gets->load(), 2);
  tier->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
