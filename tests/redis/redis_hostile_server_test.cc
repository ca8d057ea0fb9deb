// The Redis tier against a server that does not speak Redis as it should
// (tests/redis/scripted_redis.h): endless reply lines, absurd bulk lengths,
// arrays where a status belongs, and redirects to hosts it must not follow.
// Every op must end with a clear Status, quickly, and the process must live.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "kvtier/block_header.h"
#include "tests/redis/redis_test_util.h"
#include "tests/redis/scripted_redis.h"
#include "tests/support/block_data.h"
#include "tests/support/time_scale.h"
#include "tiers/redis/redis_router.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;
using Answer = ScriptedRedis::Answer;
using Argv = std::vector<std::string>;

constexpr NamespaceId kNs{0x4057};
constexpr uint64_t kBlock = 4096;

TierOptions Options(const ScriptedRedis& server, bool cluster) {
  TierOptions o = RedisTierOptionsFor({server.endpoint()}, 64 * kBlock, cluster);
  o.redis.password = "secret";
  o.redis.connections = 1;
  o.redis.op_timeout_ms = 500;
  o.redis.connect_timeout_ms = 500;
  return o;
}

std::unique_ptr<Tier> Open(const TierOptions& o) { return OpenRedisTier(o, kBlock); }

// One read of a block; the status it ended with, or DeadlineExceeded.
Status ReadOne(Tier& tier, uint64_t i) {
  std::vector<std::byte> out;
  return ReadOneBlock(tier, kNs, i, kBlock, &out);
}

Status WriteOne(Tier& tier, uint64_t i) {
  std::vector<std::byte> data = BlockBytes(TestKey(i), kBlock);
  WriteOp wr{TestKey(i), data};
  Completion c = tier.Write(kNs, std::span(&wr, 1));
  Status st = c.WaitFor(5s);
  return st.code() == StatusCode::kDeadlineExceeded ? st : c.result(0);
}

bool Has(const Status& st, std::string_view text) {
  return st.message().find(text) != std::string_view::npos;
}

// A server that answers every data command with `prefix`, then 64 MiB of
// 'A': reading it must end Corruption and drop the connection long before
// the server is done sending. The op's status, for further checks.
Status ExpectFloodCutOff(std::string prefix) {
  constexpr uint64_t kFloodBytes = 64ull << 20;
  auto server = ScriptedRedis::Start([prefix](const Argv& argv) {
    Answer a;
    if (ScriptedRedis::Handshake(argv, 0, &a)) return a;
    a.bytes = prefix;
    a.flood_bytes = kFloodBytes;
    return a;
  });
  EXPECT_TRUE(server);
  if (!server) return Status::Internal("no server");
  auto tier = Open(Options(*server, /*cluster=*/false));
  EXPECT_TRUE(tier);
  if (!tier) return Status::Internal("no tier");
  const Status st = ReadOne(*tier, 1);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  const ScriptedRedis::Flood flood = server->WaitFlood(3s);
  EXPECT_TRUE(flood.ended);
  EXPECT_TRUE(flood.peer_closed) << "the tier must drop the connection";
  EXPECT_LT(flood.sent_bytes, kFloodBytes / 2);
  tier->Shutdown();
  return st;
}

// A reply line with no CR must not grow the read buffer without limit: the op
// fails once the line passes 64 KiB and the connection is closed.
// A lookup's EXISTS has a connection of its own: it is answered while a
// SET the server is slow to answer still holds the only data connection
// (where it queued before, for as long as the SET took).
TEST(RedisHostileServer, ExistsIsAnsweredWhileASetHoldsTheDataConnection) {
  std::mutex mu;
  std::condition_variable cv;
  bool set_arrived = false, release = false;  // guarded by mu
  auto server = ScriptedRedis::Start([&](const Argv& argv) {
    Answer a;
    if (ScriptedRedis::Handshake(argv, 0, &a)) return a;
    if (argv[0] == "SET") {
      std::unique_lock lock(mu);
      set_arrived = true;
      cv.notify_all();
      cv.wait_for(lock, 20s, [&] { return release; });
      a.bytes = "+OK\r\n";
    } else {
      a.bytes = argv[0] == "EXISTS" ? ":1\r\n" : "-ERR unexpected\r\n";
    }
    return a;
  });
  ASSERT_TRUE(server);
  TierOptions o = Options(*server, /*cluster=*/false);
  o.redis.op_timeout_ms = 20000;  // the held SET must not time out meanwhile
  auto tier = Open(o);
  ASSERT_TRUE(tier);
  std::vector<std::byte> data = BlockBytes(TestKey(1), kBlock);
  WriteOp wr{TestKey(1), data};
  Completion write = tier->Write(kNs, std::span(&wr, 1));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return set_arrived; }));
  }
  const BlockKey key = TestKey(2);
  Completion contains = tier->Contains(kNs, std::span(&key, 1));
  const bool answered_first = contains.WaitFor(10s).code() != StatusCode::kDeadlineExceeded;
  {
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  }
  EXPECT_TRUE(answered_first);
  EXPECT_TRUE(contains.Wait().ok()) << contains.status().ToString();
  EXPECT_TRUE(write.Wait().ok()) << write.status().ToString();
  tier->Shutdown();
}

TEST(RedisHostileServer, EndlessReplyLineFailsWithCorruption) {
  const Status st = ExpectFloodCutOff("+");
  EXPECT_TRUE(Has(st, "reply line longer than 65536 bytes")) << st.ToString();
}

// A GET value that announces 4 GB and is not a block: rejected at its
// header, and the rest is not drained (it could trickle in for minutes, each
// read within its timeout) but cut off with the connection.
TEST(RedisHostileServer, AHugeValueThatIsNotABlockIsCutOffNotDrained) {
  (void)ExpectFloodCutOff("$4000000000\r\n");
}

// A tier on a server that answers every GET with `head`, then
// `flood_bytes` bytes one every `gap`, and the read of one block from it:
// its status and how long it took (the server kept for a look at the flood).
struct TrickledRead {
  std::unique_ptr<ScriptedRedis> server;
  std::unique_ptr<Tier> tier;
  Status st;
  std::chrono::steady_clock::duration took{};
  ~TrickledRead() {
    server.reset();  // stops a flood still running, so that the I/O thread ends either way
    if (tier) tier->Shutdown();
  }
};
void ReadTrickled(std::string head, uint64_t flood_bytes, std::chrono::milliseconds gap,
                  TrickledRead* r) {
  r->server = ScriptedRedis::Start([=](const Argv& argv) {
    Answer a;
    if (ScriptedRedis::Handshake(argv, 0, &a)) return a;
    a.bytes = head;
    a.flood_bytes = flood_bytes;
    a.flood_gap = gap;
    return a;
  });
  ASSERT_TRUE(r->server);
  r->tier = Open(Options(*r->server, /*cluster=*/false));
  ASSERT_TRUE(r->tier);
  const auto start = std::chrono::steady_clock::now();
  r->st = ReadOne(*r->tier, 1);
  r->took = std::chrono::steady_clock::now() - start;
}

// A GET value whose bytes trickle in, each well within the per-read timeout:
// the reply as a whole must still fail within a small multiple of the op
// timeout (500 ms here), not after the minutes the server would take, and
// the connection must be dropped.
TEST(RedisHostileServer, TricklingGetValueTimesOut) {
  const uint64_t value_bytes = kBlockHeaderBytes + kBlock;
  TrickledRead r;
  ASSERT_NO_FATAL_FAILURE(
      ReadTrickled("$" + std::to_string(value_bytes) + "\r\n", value_bytes, 100ms, &r));
  EXPECT_EQ(r.st.code(), StatusCode::kUnavailable) << r.st.ToString();
  EXPECT_TRUE(Has(r.st, "timed out after")) << r.st.ToString();
  EXPECT_LT(r.took, Scaled(1500ms));
  const ScriptedRedis::Flood flood = r.server->WaitFlood(Scaled(1s));
  EXPECT_TRUE(flood.peer_closed) << "the tier must drop the connection";
}

// A GET value announced at 4 GB, whose header then trickles in a byte every
// 400 ms (each within the 500 ms per-read timeout): the announced length
// buys the server no time before the header has vouched for it. It used to
// stretch the reply's deadline by 16 minutes, and the header alone took 26 s.
TEST(RedisHostileServer, AnAnnouncedLengthBuysNoTimeBeforeTheHeader) {
  TrickledRead r;
  ASSERT_NO_FATAL_FAILURE(ReadTrickled("$4000000000\r\n", kBlockHeaderBytes, 400ms, &r));
  EXPECT_FALSE(r.st.ok());
  EXPECT_LT(r.took, Scaled(1500ms)) << r.st.ToString();
}

// A server that answers each of 20 pipelined GETs 400 ms after the last,
// each within the 500 ms timeout: the chunk's replies share one deadline,
// so the read fails about a timeout in, not after the 8 s the server takes.
TEST(RedisHostileServer, RepliesEachJustInTimeShareTheChunksDeadline) {
  auto server = ScriptedRedis::Start([](const Argv& argv) {
    Answer a;
    if (ScriptedRedis::Handshake(argv, 0, &a)) return a;
    std::this_thread::sleep_for(400ms);
    a.bytes = "$-1\r\n";
    return a;
  });
  ASSERT_TRUE(server);
  auto tier = Open(Options(*server, /*cluster=*/false));
  ASSERT_TRUE(tier);
  constexpr size_t kReads = 20;
  std::vector<std::vector<std::byte>> out(kReads, std::vector<std::byte>(kBlock));
  std::vector<ReadOp> ops;
  for (size_t i = 0; i < kReads; ++i) ops.push_back(ReadOp{TestKey(i), out[i]});
  const auto start = std::chrono::steady_clock::now();
  Completion c = tier->Read(kNs, ops);
  (void)c.WaitFor(20s);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(c.Poll());
  EXPECT_LT(took, Scaled(2000ms));
  EXPECT_EQ(c.result(kReads - 1).code(), StatusCode::kUnavailable)
      << c.result(kReads - 1).ToString();
  server.reset();
  tier->Shutdown();
}

// A script for a one-master cluster whose master (port *self) answers the
// data command `cmd` with an ASK to itself and ASKING with `asking_reply`.
ScriptedRedis::Script AskThenAnswer(std::shared_ptr<std::atomic<uint16_t>> self, std::string cmd,
                                    std::string asking_reply) {
  return [=](const Argv& argv) {
    Answer a;
    if (ScriptedRedis::Handshake(argv, self->load(), &a)) return a;
    if (argv[0] == "ASKING") {
      a.bytes = asking_reply;
    } else if (argv[0] == cmd) {
      a.bytes = "-ASK 0 127.0.0.1:" + std::to_string(self->load()) + "\r\n";
    } else {
      a.bytes = "-ERR unexpected\r\n";
    }
    return a;
  };
}

// A bulk length near INT64_MAX in the ASKING reply once threw out of the I/O
// thread (std::terminate); it must fail the op and leave the tier working.
TEST(RedisHostileServer, HugeBulkReplyToAskingFailsTheOp) {
  auto self = std::make_shared<std::atomic<uint16_t>>(0);
  auto server = ScriptedRedis::Start(AskThenAnswer(self, "GET", "$9223372036854775807\r\n"));
  ASSERT_TRUE(server);
  self->store(server->port());
  auto tier = Open(Options(*server, /*cluster=*/true));
  ASSERT_TRUE(tier);
  for (uint64_t i = 0; i < 2; ++i) {
    const Status st = ReadOne(*tier, i);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
    EXPECT_TRUE(Has(st, "bulk reply of 9223372036854775807 bytes to a control command"))
        << st.ToString();
  }
  tier->Shutdown();
}

// An array answering ASKING must not leave its items to be read as the
// replies of the commands after it (here its +OK would pass for the SET's).
TEST(RedisHostileServer, ArrayReplyToAskingFailsTheOp) {
  auto self = std::make_shared<std::atomic<uint16_t>>(0);
  auto server = ScriptedRedis::Start(AskThenAnswer(self, "SET", "*1\r\n+OK\r\n"));
  ASSERT_TRUE(server);
  self->store(server->port());
  auto tier = Open(Options(*server, /*cluster=*/true));
  ASSERT_TRUE(tier);
  const Status st = WriteOne(*tier, 1);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_TRUE(Has(st, "array reply of 1 items to a control command")) << st.ToString();
  EXPECT_EQ(tier->Usage().blocks, 0u);
  tier->Shutdown();
}

// A script that answers the handshake and every other command with `reply`.
ScriptedRedis::Script Always(std::string reply, uint16_t slot_owner = 0) {
  return [=](const Argv& argv) {
    Answer a;
    if (!ScriptedRedis::Handshake(argv, slot_owner, &a)) a.bytes = reply;
    return a;
  };
}

// Without cluster a redirect is an error of its op: the tier never connects
// to (and sends its password to) the host a server names.
TEST(RedisHostileServer, RedirectWithoutClusterIsNotFollowed) {
  auto elsewhere = ScriptedRedis::Start(Always("+OK\r\n"));
  ASSERT_TRUE(elsewhere);
  const std::string moved = "MOVED 0 " + elsewhere->endpoint();
  auto server = ScriptedRedis::Start(Always("-" + moved + "\r\n"));
  ASSERT_TRUE(server);
  auto tier = Open(Options(*server, /*cluster=*/false));
  ASSERT_TRUE(tier);
  const Status st = WriteOne(*tier, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Has(st, moved)) << st.ToString();
  EXPECT_TRUE(Has(st, "not followed without cluster: true")) << st.ToString();
  EXPECT_EQ(tier->Usage().blocks, 0u);
  EXPECT_EQ(elsewhere->accepted(), 0);
  tier->Shutdown();
}

// In a cluster a redirect goes only to a master of the slot map, so a server
// cannot make the tier open nodes (threads, connections) for any host.
TEST(RedisHostileServer, ClusterRedirectOutsideTheSlotMapIsNotFollowed) {
  auto elsewhere = ScriptedRedis::Start(Always("$-1\r\n"));
  ASSERT_TRUE(elsewhere);
  auto self = std::make_shared<std::atomic<uint16_t>>(0);
  const std::string moved = "MOVED 0 " + elsewhere->endpoint();
  auto server = ScriptedRedis::Start([self, moved](const Argv& argv) {
    Answer a;
    if (!ScriptedRedis::Handshake(argv, self->load(), &a)) a.bytes = "-" + moved + "\r\n";
    return a;
  });
  ASSERT_TRUE(server);
  self->store(server->port());
  auto tier = Open(Options(*server, /*cluster=*/true));
  ASSERT_TRUE(tier);
  const Status st = ReadOne(*tier, 1);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_TRUE(Has(st, elsewhere->endpoint() + " is not a master the cluster names"))
      << st.ToString();
  EXPECT_EQ(elsewhere->accepted(), 0);
  tier->Shutdown();
}

// A redirect to a master the cluster names, whose node cannot be started
// (the system has no thread to give): the op fails with that reason and its
// SET is settled, so the tier counts nothing for it.
TEST(RedisHostileServer, RedirectToANodeThatCannotStartFailsTheOpAndFreesItsRoom) {
  auto elsewhere = ScriptedRedis::Start(Always("+OK\r\n"));
  ASSERT_TRUE(elsewhere);
  auto self = std::make_shared<std::atomic<uint16_t>>(0);
  const std::string moved = "MOVED 0 " + elsewhere->endpoint();
  const std::string nodes = "a1 127.0.0.1:" + std::string("%SELF%") +
                            "@1 myself,master - 0 0 1 connected 0-16383\n"
                            "b2 " +
                            elsewhere->endpoint() + "@2 master - 0 0 2 connected\n";
  auto server = ScriptedRedis::Start([self, moved, nodes](const Argv& argv) {
    Answer a;
    if (argv.size() == 2 && argv[0] == "CLUSTER" && argv[1] == "NODES") {
      std::string text = nodes;
      text.replace(text.find("%SELF%"), 6, std::to_string(self->load()));
      a.bytes = "$" + std::to_string(text.size()) + "\r\n" + text + "\r\n";
    } else if (!ScriptedRedis::Handshake(argv, self->load(), &a)) {
      a.bytes = "-" + moved + "\r\n";
    }
    return a;
  });
  ASSERT_TRUE(server);
  self->store(server->port());
  auto tier = Open(Options(*server, /*cluster=*/true));
  ASSERT_TRUE(tier);
  internal::TEST_SetBeforeNewRedisNode([] {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  });
  const Status st = WriteOne(*tier, 1);
  internal::TEST_SetBeforeNewRedisNode(nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_TRUE(Has(st, "could not start a node for " + elsewhere->endpoint())) << st.ToString();
  EXPECT_EQ(tier->Usage().blocks, 0u);
  EXPECT_EQ(tier->Usage().used_bytes, 0u);
  EXPECT_EQ(elsewhere->accepted(), 0);
  tier->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
