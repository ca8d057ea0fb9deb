// The Redis tier resends an op a cluster refused for the moment (TRYAGAIN,
// CLUSTERDOWN) a bounded number of times, against a scripted cluster node
// (tests/redis/scripted_redis.h) that owns every slot: a refusal that passes
// costs a short wait, not a failed save; one that lasts still fails, in
// bounded time; and Shutdown neither drops nor waits long on a resend.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/redis/redis_test_util.h"
#include "tests/redis/scripted_redis.h"
#include "tests/support/block_data.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;
using Answer = ScriptedRedis::Answer;
using Argv = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

constexpr NamespaceId kNs{0x7e7};
constexpr uint64_t kBlock = 4096;

// A one-node cluster whose answer to each data command is `data(argv, n)`,
// n counting that command's arrivals from 1.
class RetryServer {
 public:
  using Data = std::function<std::string(const Argv& argv, int n)>;

  explicit RetryServer(Data data) : data_(std::move(data)) {
    server_ = ScriptedRedis::Start([this](const Argv& argv) {
      Answer a;
      if (argv[0] == "CLUSTER" && argv.size() > 1 && argv[1] == "NODES") {
        const std::string line = "0123456789abcdef 127.0.0.1:" + std::to_string(port_.load()) +
                                 "@1 myself,master - 0 0 1 connected 0-16383\n";
        a.bytes = "$" + std::to_string(line.size()) + "\r\n" + line + "\r\n";
        return a;
      }
      if (ScriptedRedis::Handshake(argv, port_.load(), &a)) return a;
      const int n = argv[0] == "SET"      ? ++sets_
                    : argv[0] == "EXISTS" ? ++exists_
                    : argv[0] == "GET"    ? ++gets_
                                          : 0;
      a.bytes = data_(argv, n);
      return a;
    });
    if (server_) port_.store(server_->port());
  }

  std::unique_ptr<Tier> Open() const {
    TierOptions o = RedisTierOptionsFor({server_->endpoint()}, 64 * kBlock, /*cluster=*/true);
    o.redis.connections = 1;
    o.redis.op_timeout_ms = 1000;
    o.redis.connect_timeout_ms = 1000;
    return OpenRedisTier(o, kBlock);
  }

  bool started() const { return server_ != nullptr; }
  int sets() const { return sets_.load(); }
  int exists() const { return exists_.load(); }
  int gets() const { return gets_.load(); }

 private:
  Data data_;
  std::atomic<uint16_t> port_{0};
  std::atomic<int> sets_{0}, exists_{0}, gets_{0};
  std::unique_ptr<ScriptedRedis> server_;
};

Completion WriteBlocks(Tier& tier, const std::vector<uint64_t>& ids,
                       std::vector<std::vector<std::byte>>* data) {
  std::vector<WriteOp> ops;
  for (uint64_t i : ids) data->push_back(BlockBytes(TestKey(i), kBlock));
  for (size_t j = 0; j < ids.size(); ++j) ops.push_back({TestKey(ids[j]), (*data)[j]});
  return tier.Write(kNs, ops);
}

const std::string kClusterDown = "-CLUSTERDOWN Hash slot not served\r\n";

TEST(RedisRetry, AWriteRefusedTwiceWithTryAgainIsStoredOnTheThirdSend) {
  RetryServer server([](const Argv& argv, int n) -> std::string {
    if (argv[0] == "SET")
      return n <= 2 ? "-TRYAGAIN Multiple keys request during rehashing\r\n" : "+OK\r\n";
    return "-ERR unexpected\r\n";
  });
  ASSERT_TRUE(server.started());
  auto tier = server.Open();
  ASSERT_TRUE(tier);
  std::vector<std::vector<std::byte>> data;
  Completion c = WriteBlocks(*tier, {1}, &data);
  ASSERT_NE(c.WaitFor(10s).code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  EXPECT_EQ(server.sets(), 3);
  EXPECT_EQ(tier->Usage().used_bytes, kBlock);
  tier->Shutdown();
}

// Only the refused op is sent again; the others keep their first answer.
TEST(RedisRetry, OnlyTheRefusedOpsOfABatchAreSentAgain) {
  RetryServer server([](const Argv& argv, int n) -> std::string {
    if (argv[0] != "EXISTS") return "-ERR unexpected\r\n";
    // Arrivals 1-3 are the batch's three keys in order; the 4th is the
    // resend of the one refused.
    if (n == 2) return kClusterDown;
    return n == 3 ? ":0\r\n" : ":1\r\n";
  });
  ASSERT_TRUE(server.started());
  auto tier = server.Open();
  ASSERT_TRUE(tier);
  const std::vector<BlockKey> keys = {TestKey(1), TestKey(2), TestKey(3)};
  Completion c = tier->Contains(kNs, keys);
  ASSERT_NE(c.WaitFor(10s).code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  EXPECT_TRUE(c.result(1).ok()) << c.result(1).ToString();  // the resend's ":1"
  EXPECT_EQ(c.result(2).code(), StatusCode::kNotFound) << c.result(2).ToString();
  EXPECT_EQ(server.exists(), 4);
  tier->Shutdown();
}

// A refusal that lasts fails the op Unavailable, with the server's words,
// after the first send and four resends, well inside a second.
TEST(RedisRetry, ALastingClusterDownFailsUnavailableAfterFourResends) {
  RetryServer server([](const Argv& argv, int) -> std::string {
    return argv[0] == "GET" ? kClusterDown : "-ERR unexpected\r\n";
  });
  ASSERT_TRUE(server.started());
  auto tier = server.Open();
  ASSERT_TRUE(tier);
  std::vector<std::byte> out(kBlock);
  ReadOp rd{TestKey(7), out};
  const Clock::time_point start = Clock::now();
  Completion c = tier->Read(kNs, std::span(&rd, 1));
  ASSERT_NE(c.WaitFor(10s).code(), StatusCode::kDeadlineExceeded);
  const auto took = Clock::now() - start;
  EXPECT_EQ(c.result(0).code(), StatusCode::kUnavailable) << c.result(0).ToString();
  EXPECT_NE(c.result(0).message().find("CLUSTERDOWN"), std::string_view::npos);
  EXPECT_EQ(server.gets(), 5);
  EXPECT_GE(took, 300ms);  // 20 + 40 + 80 + 160 ms between the sends
  EXPECT_LT(took, 5s);
  tier->Shutdown();
}

// A write whose resend is pending when Shutdown starts still ends (here
// failed, as the server keeps refusing), and Shutdown returns once it has.
TEST(RedisRetry, ShutdownWaitsForAPendingResendAndNoLonger) {
  RetryServer server([](const Argv& argv, int) -> std::string {
    return argv[0] == "SET" ? kClusterDown : "-ERR unexpected\r\n";
  });
  ASSERT_TRUE(server.started());
  auto tier = server.Open();
  ASSERT_TRUE(tier);
  std::vector<std::vector<std::byte>> data;
  Completion c = WriteBlocks(*tier, {1, 2, 3}, &data);
  const auto deadline = Clock::now() + 5s;
  while (server.sets() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_GT(server.sets(), 0);
  const Clock::time_point start = Clock::now();
  tier->Shutdown();
  EXPECT_LT(Clock::now() - start, 5s);
  ASSERT_TRUE(c.Poll());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kUnavailable) << c.result(i).ToString();
  }
  EXPECT_EQ(tier->Usage().used_bytes, 0u);  // nothing stored stays counted
}

}  // namespace
}  // namespace kvtier::testing
