// Opening the Redis tier against a server that answers the setup and control
// commands (AUTH, PING, CONFIG GET, CLUSTER SLOTS) with endless lines, absurd
// lengths, oversized or too deeply nested replies, or bytes that trickle in
// (tests/redis/scripted_redis.h). Open must fail with a clear Status, quickly,
// without allocating what the server announces, and cut the flood off.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tests/redis/redis_test_util.h"
#include "tests/redis/scripted_redis.h"
#include "tests/support/block_data.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;
using Answer = ScriptedRedis::Answer;
using Argv = std::vector<std::string>;

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kFloodBytes = 64ull << 20;

// `timeout_ms` bounds each setup reply as a whole: long enough for the
// large replies below to be read on a loaded machine.
TierOptions Options(const ScriptedRedis& server, bool cluster, bool password = true,
                    uint32_t timeout_ms = 500) {
  TierOptions o = RedisTierOptionsFor({server.endpoint()}, 64 * kBlock, cluster);
  if (password) o.redis.password = "secret";
  o.redis.connections = 1;
  o.redis.op_timeout_ms = timeout_ms;
  o.redis.connect_timeout_ms = timeout_ms;
  return o;
}

// The bound for reading the two largest replies (a million values, 12 MB):
// under ThreadSanitizer they take 2 to 2.5 s on an idle machine.
const uint32_t kLargeReplyMs = static_cast<uint32_t>(Scaled(2500ms).count());

bool Has(const Status& st, std::string_view text) {
  return st.message().find(text) != std::string_view::npos;
}

// A script answering `cmd` with `answer` and the rest of the handshake as a
// well-behaved server.
ScriptedRedis::Script AnswerTo(std::string cmd, Answer answer) {
  return [=](const Argv& argv) {
    if (argv[0] == cmd) return answer;
    Answer a;
    if (!ScriptedRedis::Handshake(argv, 0, &a)) a.bytes = "-ERR unexpected\r\n";
    return a;
  };
}

// Opens a tier with `o`; expects it to fail with `code` and a message
// holding `text`, within 3 s (a second at most on an idle machine).
Status ExpectOpenFails(const TierOptions& o, StatusCode code, std::string_view text) {
  const auto start = std::chrono::steady_clock::now();
  auto tier = MakeRedisTier(o, kBlock);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(tier.ok());
  if (tier.ok()) {
    (*tier)->Shutdown();
    return Status::Ok();
  }
  EXPECT_EQ(tier.status().code(), code) << tier.status().ToString();
  EXPECT_TRUE(Has(tier.status(), text)) << tier.status().ToString();
  EXPECT_LT(took, Scaled(3s));
  return tier.status();
}

// `cmd` answered with `prefix`, then 64 MiB of 'A': Open fails Corruption
// naming the limit, and drops the connection long before the flood is sent.
void ExpectSetupFloodCutOff(std::string cmd, std::string prefix, std::string_view text,
                            bool cluster = false, bool password = true) {
  auto server =
      ScriptedRedis::Start(AnswerTo(std::move(cmd), Answer{std::move(prefix), kFloodBytes}));
  ASSERT_TRUE(server);
  (void)ExpectOpenFails(Options(*server, cluster, password), StatusCode::kCorruption, text);
  const ScriptedRedis::Flood flood = server->WaitFlood(3s);
  EXPECT_TRUE(flood.ended);
  EXPECT_TRUE(flood.peer_closed) << "the tier must drop the connection";
  EXPECT_LT(flood.sent_bytes, kFloodBytes / 2);
}

TEST(RedisHostileSetup, EndlessLineAnsweringAuthIsCutOff) {
  ExpectSetupFloodCutOff("AUTH", "+", "reply line longer than 65536 bytes");
}

TEST(RedisHostileSetup, GigabyteBulkAnsweringPingIsCutOff) {
  ExpectSetupFloodCutOff(
      "PING", "$1073741824\r\n",
      "bulk string of 1073741824 bytes in a reply exceeds the limit of 65536 bytes",
      /*cluster=*/false, /*password=*/false);
}

TEST(RedisHostileSetup, HugeArrayAnsweringAuthIsRefusedBeforeAllocating) {
  ExpectSetupFloodCutOff("AUTH", "*2000000000\r\n",
                         "reply exceeds the limit of 64 values: an array of 2000000000");
}

TEST(RedisHostileSetup, GigabyteBulkAnsweringConfigGetIsCutOff) {
  ExpectSetupFloodCutOff(
      "CONFIG", "*2\r\n$18\r\nproto-max-bulk-len\r\n$1073741824\r\n",
      "bulk string of 1073741824 bytes in a reply exceeds the limit of 65536 bytes");
}

TEST(RedisHostileSetup, HugeClusterSlotsArrayIsCutOff) {
  ExpectSetupFloodCutOff(
      "CLUSTER", "*9223372036854775807\r\n",
      "reply exceeds the limit of 524288 values: an array of 9223372036854775807",
      /*cluster=*/true);
}

// Many small arrays, each under the limits, whose values add up past them.
TEST(RedisHostileSetup, ClusterSlotsOverTheValueLimitFails) {
  std::string row = "*1000\r\n";
  for (int i = 0; i < 1000; ++i) row += ":0\r\n";
  std::string reply = "*1000\r\n";
  for (int i = 0; i < 1000; ++i) reply += row;
  auto server = ScriptedRedis::Start(AnswerTo("CLUSTER", Answer{reply}));
  ASSERT_TRUE(server);
  (void)ExpectOpenFails(Options(*server, /*cluster=*/true, /*password=*/true, kLargeReplyMs),
                        StatusCode::kCorruption, "reply exceeds the limit of 524288 values");
}

TEST(RedisHostileSetup, ClusterSlotsOverTheByteLimitFails) {
  std::string reply = "*200\r\n";
  for (int i = 0; i < 200; ++i) reply += "$60000\r\n" + std::string(60000, 'x') + "\r\n";
  auto server = ScriptedRedis::Start(AnswerTo("CLUSTER", Answer{reply}));
  ASSERT_TRUE(server);
  (void)ExpectOpenFails(Options(*server, /*cluster=*/true, /*password=*/true, kLargeReplyMs),
                        StatusCode::kCorruption, "reply exceeds the limit of 8388608 bytes");
}

// A slot map of 16,384 one-slot ranges, each with a master of its own, is
// within the reply's limits but names more masters than a cluster has: it
// is refused before a node (threads of its own) is started for any.
TEST(RedisHostileSetup, ClusterSlotsNamingTooManyMastersFails) {
  std::string reply = "*16384\r\n";
  for (int slot = 0; slot < 16384; ++slot) {
    const std::string port = std::to_string(10000 + slot);
    reply += "*3\r\n:" + std::to_string(slot) + "\r\n:" + std::to_string(slot) +
             "\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + port + "\r\n";
  }
  auto server = ScriptedRedis::Start(AnswerTo("CLUSTER", Answer{reply}));
  ASSERT_TRUE(server);
  (void)ExpectOpenFails(Options(*server, /*cluster=*/true, /*password=*/true, kLargeReplyMs),
                        StatusCode::kCorruption, "the slot map names more than 1000 masters");
}

TEST(RedisHostileSetup, ClusterSlotsNestedTooDeepFails) {
  auto server =
      ScriptedRedis::Start(AnswerTo("CLUSTER", Answer{"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:0\r\n"}));
  ASSERT_TRUE(server);
  (void)ExpectOpenFails(Options(*server, /*cluster=*/true), StatusCode::kCorruption,
                        "reply's array nesting exceeds the limit of 4 levels");
}

// Each byte within the per-read timeout, the whole reply not: the setup
// reply must still end within the connect timeout.
TEST(RedisHostileSetup, TricklingAuthReplyTimesOut) {
  Answer trickle{"+", 200};
  trickle.flood_gap = 50ms;
  auto server = ScriptedRedis::Start(AnswerTo("AUTH", trickle));
  ASSERT_TRUE(server);
  const Status st = ExpectOpenFails(Options(*server, /*cluster=*/false), StatusCode::kUnavailable,
                                    "timed out after 500 ms");
  EXPECT_TRUE(Has(st, "AUTH to redis " + server->endpoint())) << st.ToString();
  const ScriptedRedis::Flood flood = server->WaitFlood(3s);
  EXPECT_TRUE(flood.peer_closed) << "the tier must drop the connection";
}

// Well-formed setup replies are read as before: a CONFIG GET answer sets
// the value size limit; a Redis 7 CLUSTER SLOTS answer (node id and
// metadata, 4 arrays deep) routes every slot to its master.
TEST(RedisHostileSetup, WellFormedConfigGetIsRead) {
  auto server = ScriptedRedis::Start(
      AnswerTo("CONFIG", Answer{"*2\r\n$18\r\nproto-max-bulk-len\r\n$4\r\n1000\r\n"}));
  ASSERT_TRUE(server);
  (void)ExpectOpenFails(Options(*server, /*cluster=*/false), StatusCode::kInvalidArgument,
                        "exceeds the server's proto-max-bulk-len of 1000");
}

// The master's host is empty, or null (an "unknown endpoint"): both mean the
// node that answered.
class ClusterSlotsHost : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(RedisHostileSetup, ClusterSlotsHost,
                         ::testing::Values("$0\r\n\r\n", "$-1\r\n"));

TEST_P(ClusterSlotsHost, WellFormedClusterSlotsIsRead) {
  auto self = std::make_shared<std::atomic<uint16_t>>(0);
  const std::string host = GetParam();
  auto server = ScriptedRedis::Start([self, host](const Argv& argv) {
    Answer a;
    const std::string port = std::to_string(self->load());
    if (argv[0] == "CLUSTER") {
      a.bytes = "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n" + host + ":" + port + "\r\n$40\r\n" +
                std::string(40, 'f') + "\r\n*2\r\n$8\r\nhostname\r\n$4\r\nhost\r\n";
    } else if (argv[0] == "GET") {
      a.bytes = "$-1\r\n";
    } else if (!ScriptedRedis::Handshake(argv, 0, &a)) {
      a.bytes = "-ERR unexpected\r\n";
    }
    return a;
  });
  ASSERT_TRUE(server);
  self->store(server->port());
  auto tier = MakeRedisTier(Options(*server, /*cluster=*/true), kBlock);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  std::vector<std::byte> out(kBlock);
  ReadOp rd{TestKey(1), out};
  Completion c = (*tier)->Read(NamespaceId{1}, std::span(&rd, 1));
  const Status waited = c.WaitFor(5s);
  ASSERT_NE(waited.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(c.result(0).code(), StatusCode::kNotFound) << c.result(0).ToString();
  (*tier)->Shutdown();
}

// A seed whose CLUSTER SLOTS is empty (a node given no slots yet) is not a
// slot map: open moves on to the next seed, whose map routes the write.
TEST(RedisHostileSetup, EmptyClusterSlotsMovesOnToTheNextSeed) {
  auto empty = ScriptedRedis::Start(AnswerTo("CLUSTER", Answer{"*0\r\n"}));
  ASSERT_TRUE(empty);
  auto self = std::make_shared<std::atomic<uint16_t>>(0);
  auto good = ScriptedRedis::Start([self](const Argv& argv) {
    Answer a;
    if (!ScriptedRedis::Handshake(argv, self->load(), &a)) {
      a.bytes = argv[0] == "SET" ? "+OK\r\n" : "-ERR unexpected\r\n";
    }
    return a;
  });
  ASSERT_TRUE(good);
  self->store(good->port());
  TierOptions o = Options(*empty, /*cluster=*/true);
  o.servers.push_back(good->endpoint());
  auto tier = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  std::vector<std::byte> data = BlockBytes(TestKey(1), kBlock);
  WriteOp wr{TestKey(1), data};
  Completion c = (*tier)->Write(NamespaceId{1}, std::span(&wr, 1));
  ASSERT_NE(c.WaitFor(5s).code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  (*tier)->Shutdown();
}

// With only empty maps, open fails naming the seeds.
TEST(RedisHostileSetup, OnlyEmptyClusterSlotsFailsNamingTheSeeds) {
  auto empty = ScriptedRedis::Start(AnswerTo("CLUSTER", Answer{"*0\r\n"}));
  ASSERT_TRUE(empty);
  const Status st = ExpectOpenFails(Options(*empty, /*cluster=*/true), StatusCode::kUnavailable,
                                    "the slot map is empty");
  EXPECT_TRUE(Has(st, "no seed gave a slot map (seeds " + empty->endpoint() + ")"))
      << st.ToString();
}

// A first server that refuses with an error reply other than refused
// credentials (full, or something unexpected) and closes: open goes on to
// the second server.
class FirstServerRefuses : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(RedisHostileSetup, FirstServerRefuses,
                         ::testing::Values("-ERR max number of clients reached\r\n",
                                           "-ERR something unexpected\r\n"));

TEST_P(FirstServerRefuses, OpenUsesTheNextServer) {
  Answer refuse{GetParam()};
  refuse.close = true;
  auto full = ScriptedRedis::Start([refuse](const Argv&) { return refuse; });
  ASSERT_TRUE(full);
  auto good = ScriptedRedis::Start(AnswerTo("SET", Answer{"+OK\r\n"}));
  ASSERT_TRUE(good);
  TierOptions o = Options(*full, /*cluster=*/false);
  o.servers.push_back(good->endpoint());
  auto tier = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_GE(full->accepted(), 1);
  (*tier)->Shutdown();
}

// With ttl_s set, reads are GETEX (Redis 6.2+): a server that says it is
// older is refused at open, naming the fix, instead of failing every read.
// Without a TTL, or from a server that does not say, the tier opens.
TEST(RedisHostileSetup, AServerTooOldForGetexIsRefusedWhenATtlIsSet) {
  auto info = [](std::string version) {
    const std::string body =
        "# Server\r\nredis_version:" + version + "\r\nredis_mode:standalone\r\n";
    return Answer{"$" + std::to_string(body.size()) + "\r\n" + body + "\r\n"};
  };
  for (const auto& [version, ttl, opens] :
       {std::tuple{"6.0.16", 60, false}, std::tuple{"5.0.7", 60, false},
        std::tuple{"6.2.0", 60, true}, std::tuple{"7.0.15", 60, true},
        std::tuple{"6.0.16", 0, true}}) {
    SCOPED_TRACE(std::string(version) + " ttl " + std::to_string(ttl));
    auto server = ScriptedRedis::Start(AnswerTo("INFO", info(version)));
    ASSERT_TRUE(server);
    TierOptions o = Options(*server, /*cluster=*/false);
    o.redis.ttl_s = ttl;
    if (!opens) {
      (void)ExpectOpenFails(o, StatusCode::kInvalidArgument, "needs Redis 6.2 or newer");
      continue;
    }
    auto tier = MakeRedisTier(o, kBlock);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    (*tier)->Shutdown();
  }
  auto silent = ScriptedRedis::Start(AnswerTo("INFO", Answer{"-ERR unknown command\r\n"}));
  ASSERT_TRUE(silent);
  TierOptions o = Options(*silent, /*cluster=*/false);
  o.redis.ttl_s = 60;
  auto tier = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  (*tier)->Shutdown();
}

// Keys hash to every server, so each is asked at open, not only the first
// that answers: a second server too old for GETEX is refused (its reads
// all failed), and the smallest value limit of the servers holds.
TEST(RedisHostileSetup, EveryServerIsCheckedAtOpen) {
  const std::string body = "# Server\r\nredis_version:7.0.15\r\n";
  const std::string old_body = "# Server\r\nredis_version:6.0.16\r\n";
  auto bulk = [](const std::string& b) {
    return Answer{"$" + std::to_string(b.size()) + "\r\n" + b + "\r\n"};
  };
  auto fresh = ScriptedRedis::Start(AnswerTo("INFO", bulk(body)));
  auto old = ScriptedRedis::Start(AnswerTo("INFO", bulk(old_body)));
  ASSERT_TRUE(fresh && old);
  TierOptions o = Options(*fresh, /*cluster=*/false);
  o.servers.push_back(old->endpoint());
  o.redis.ttl_s = 60;
  Status st = ExpectOpenFails(o, StatusCode::kInvalidArgument, "needs Redis 6.2 or newer");
  EXPECT_TRUE(Has(st, old->endpoint())) << st.ToString();

  auto large = ScriptedRedis::Start(
      AnswerTo("CONFIG", Answer{"*2\r\n$18\r\nproto-max-bulk-len\r\n$10\r\n1073741824\r\n"}));
  auto small = ScriptedRedis::Start(
      AnswerTo("CONFIG", Answer{"*2\r\n$18\r\nproto-max-bulk-len\r\n$4\r\n1000\r\n"}));
  ASSERT_TRUE(large && small);
  for (bool small_first : {false, true}) {
    SCOPED_TRACE(small_first ? "small first" : "large first");
    TierOptions two = Options(small_first ? *small : *large, /*cluster=*/false);
    two.servers.push_back((small_first ? large : small)->endpoint());
    (void)ExpectOpenFails(two, StatusCode::kInvalidArgument,
                          "exceeds the server's proto-max-bulk-len of 1000");
  }
}

// A server that was not asked at open (it does not say its version) and
// does not know GETEX: a read with ttl_s set fails InvalidArgument naming
// the fix, not as an I/O error.
TEST(RedisHostileSetup, AReadFromAServerWithoutGetexSaysWhy) {
  auto server = ScriptedRedis::Start(AnswerTo(
      "GETEX", Answer{"-ERR unknown command `GETEX`, with args beginning with: `k`, \r\n"}));
  ASSERT_TRUE(server);
  TierOptions o = Options(*server, /*cluster=*/false);
  o.redis.ttl_s = 60;
  auto tier = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  std::vector<std::byte> out(kBlock);
  ReadOp rd{TestKey(1), out};
  Completion c = (*tier)->Read(NamespaceId{1}, std::span(&rd, 1));
  (void)c.Wait();
  EXPECT_EQ(c.result(0).code(), StatusCode::kInvalidArgument) << c.result(0).ToString();
  EXPECT_TRUE(Has(c.result(0), "needs Redis 6.2 or newer")) << c.result(0).ToString();
  (*tier)->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
