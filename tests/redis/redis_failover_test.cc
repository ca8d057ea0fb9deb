// The Redis tier in a cluster whose masters change under it, played by
// scripted servers (tests/redis/scripted_redis.h) so each change is exact: a
// master that dies sends no MOVED, so the tier must itself ask the cluster
// who owns the dead master's slots now, and send its ops there.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/redis/redis_test_util.h"
#include "tests/redis/scripted_redis.h"
#include "tests/support/block_data.h"
#include "tests/support/time_scale.h"
#include "tiers/redis/redis_routing.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;
using Answer = ScriptedRedis::Answer;
using Argv = std::vector<std::string>;

constexpr NamespaceId kNs{0xFA11};
constexpr uint64_t kBlock = 4096;
// Past the 100 ms the tier waits between two reads of the slot map.
constexpr auto kPastRefreshInterval = 200ms;

// One CLUSTER SLOTS entry: slots [first, last] served by 127.0.0.1:port.
std::string Range(int first, int last, uint16_t port) {
  return "*3\r\n:" + std::to_string(first) + "\r\n:" + std::to_string(last) +
         "\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + std::to_string(port) + "\r\n";
}

// A cluster node played by a script: answers the handshake, CLUSTER SLOTS
// with whatever *slots holds at the time, and every GET, which it counts,
// with a miss, or with nothing once *mute is set.
struct Node {
  std::shared_ptr<std::string> slots = std::make_shared<std::string>();
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::atomic<int>> gets = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<bool>> mute = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<ScriptedRedis> server;

  static Node Start() {
    Node n;
    n.server = ScriptedRedis::Start(
        [slots = n.slots, mu = n.mu, gets = n.gets, mute = n.mute](const Argv& argv) {
          Answer a;
          if (ScriptedRedis::Handshake(argv, 0, &a)) return a;
          if (argv[0] == "CLUSTER") {
            std::lock_guard lock(*mu);
            a.bytes = *slots;
          } else if (argv[0] == "GET") {
            gets->fetch_add(1);
            if (!mute->load()) a.bytes = "$-1\r\n";
          } else {
            a.bytes = "-ERR unexpected\r\n";
          }
          return a;
        });
    return n;
  }
  void SetSlots(std::string reply) {
    std::lock_guard lock(*mu);
    *slots = std::move(reply);
  }
  uint16_t port() const { return server->port(); }
};

// Both nodes report slots 0-8191 at `a` and 8192-16383 at `b`; false when
// either failed to start.
bool SplitSlots(Node& a, Node& b) {
  if (!a.server || !b.server) return false;
  const std::string split = "*2\r\n" + Range(0, 8191, a.port()) + Range(8192, 16383, b.port());
  a.SetSlots(split);
  b.SetSlots(split);
  return true;
}

TierOptions ClusterOptions(std::vector<std::string> seeds) {
  TierOptions o = RedisTierOptionsFor(std::move(seeds), 64 * kBlock, /*cluster=*/true);
  o.redis.connections = 1;
  o.redis.op_timeout_ms = 500;
  o.redis.connect_timeout_ms = 500;
  return o;
}

std::unique_ptr<Tier> Open(const TierOptions& o) { return OpenRedisTier(o, kBlock); }

// A block whose key the tier puts in a slot in [first, last] (half the
// slots: found within a few tries).
uint64_t BlockInSlots(const TierOptions& o, int first, int last) {
  for (uint64_t i = 0; i < 10'000; ++i) {
    const uint16_t slot =
        internal::RedisHashSlot(internal::RedisBlockKeyName(o.redis.key_prefix, kNs, TestKey(i)));
    if (slot >= first && slot <= last) return i;
  }
  ADD_FAILURE() << "no key in slots " << first << "-" << last;
  return 0;
}

Status ReadOne(Tier& tier, uint64_t i) {
  std::vector<std::byte> out;
  return ReadOneBlock(tier, kNs, i, kBlock, &out);
}

// The master of slots 0-8191 dies and the other master takes them over (as a
// replica promoted in its place would): the next read of a key there goes
// to the new owner, within that same read.
TEST(RedisFailover, SlotsOfADeadMasterAreFoundAtTheirNewOwner) {
  Node a = Node::Start();
  Node b = Node::Start();
  ASSERT_TRUE(SplitSlots(a, b));
  const TierOptions o = ClusterOptions({a.server->endpoint()});
  auto tier = Open(o);
  ASSERT_TRUE(tier);
  const uint64_t block = BlockInSlots(o, 0, 8191);
  Status st = ReadOne(*tier, block);
  ASSERT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  ASSERT_EQ(a.gets->load(), 1);

  b.SetSlots("*1\r\n" + Range(0, 16383, b.port()));
  a.server.reset();  // dies: its port refuses connections
  std::this_thread::sleep_for(kPastRefreshInterval);
  const auto start = std::chrono::steady_clock::now();
  st = ReadOne(*tier, block);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(b.gets->load(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(1s));
  // Later reads go straight to the new owner.
  EXPECT_EQ(ReadOne(*tier, block).code(), StatusCode::kNotFound);
  EXPECT_EQ(b.gets->load(), 2);
  tier->Shutdown();
}

// A master that stops answering (its host gone, its packets dropped) times
// out rather than refusing: the op is then sent where its slot went.
TEST(RedisFailover, OpTimedOutOnAMasterThatMovedIsSentToTheNewOwner) {
  Node a = Node::Start();
  Node b = Node::Start();
  ASSERT_TRUE(SplitSlots(a, b));
  const TierOptions o = ClusterOptions({a.server->endpoint()});
  auto tier = Open(o);
  ASSERT_TRUE(tier);
  const uint64_t block = BlockInSlots(o, 0, 8191);
  a.mute->store(true);
  b.SetSlots("*1\r\n" + Range(0, 16383, b.port()));
  std::this_thread::sleep_for(kPastRefreshInterval);
  const auto start = std::chrono::steady_clock::now();
  const Status st = ReadOne(*tier, block);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(a.gets->load(), 1);
  EXPECT_EQ(b.gets->load(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            Scaled(std::chrono::milliseconds(o.redis.op_timeout_ms) + 1s));
  tier->Shutdown();
}

// While a master is down and no other node has taken its slots, its keys
// fail fast with Unavailable, and the tier keeps asking (at most every
// 100 ms) until a node owns them again.
TEST(RedisFailover, KeysOfADeadMasterFailUntilTheirSlotsMove) {
  Node a = Node::Start();
  Node b = Node::Start();
  ASSERT_TRUE(SplitSlots(a, b));
  const TierOptions o = ClusterOptions({a.server->endpoint(), b.server->endpoint()});
  auto tier = Open(o);
  ASSERT_TRUE(tier);
  const uint64_t block = BlockInSlots(o, 0, 8191);
  a.server.reset();
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Status st = ReadOne(*tier, block);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(1s));
    std::this_thread::sleep_for(kPastRefreshInterval);
  }
  EXPECT_EQ(b.gets->load(), 0);
  b.SetSlots("*1\r\n" + Range(0, 16383, b.port()));
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  Status st;
  do {
    st = ReadOne(*tier, block);
    if (st.code() == StatusCode::kUnavailable) std::this_thread::sleep_for(20ms);
  } while (st.code() == StatusCode::kUnavailable && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(b.gets->load(), 1);
  tier->Shutdown();
}

// Every master of the map the tier read is gone; the new master is one of
// the configured servers, which the tier never needed so far. It is asked.
TEST(RedisFailover, ConfiguredServersAreAskedWhenEveryKnownMasterIsGone) {
  Node a = Node::Start();
  Node r = Node::Start();
  ASSERT_TRUE(a.server && r.server);
  a.SetSlots("*1\r\n" + Range(0, 16383, a.port()));
  r.SetSlots("*1\r\n" + Range(0, 16383, a.port()));
  const TierOptions o = ClusterOptions({a.server->endpoint(), r.server->endpoint()});
  auto tier = Open(o);
  ASSERT_TRUE(tier);
  EXPECT_EQ(r.server->accepted(), 0) << "the first server answered; the second is not needed";
  r.SetSlots("*1\r\n" + Range(0, 16383, r.port()));
  a.server.reset();
  std::this_thread::sleep_for(kPastRefreshInterval);
  const Status st = ReadOne(*tier, 1);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(r.gets->load(), 1);
  tier->Shutdown();
}

// `s` serves slots 8192-16383 and no node 0-8191; opens a tier on it and
// picks a block whose slot has no master.
void OpenWithoutLowerSlots(Node& s, std::unique_ptr<Tier>* tier, uint64_t* block) {
  ASSERT_TRUE(s.server);
  s.SetSlots("*1\r\n" + Range(8192, 16383, s.port()));
  const TierOptions o = ClusterOptions({s.server->endpoint()});
  *tier = Open(o);
  ASSERT_TRUE(*tier);
  *block = BlockInSlots(o, 0, 8191);
}

// A slot map with a hole (read while slots were being reassigned) is read
// again when a key falls in the hole, rather than failing it for good.
TEST(RedisFailover, SlotWithoutAMasterIsLookedUpAgain) {
  Node s = Node::Start();
  std::unique_ptr<Tier> tier;
  uint64_t block = 0;
  ASSERT_NO_FATAL_FAILURE(OpenWithoutLowerSlots(s, &tier, &block));
  Status st = ReadOne(*tier, block);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("no redis cluster node serves the slot"), std::string_view::npos)
      << st.ToString();
  s.SetSlots("*1\r\n" + Range(0, 16383, s.port()));
  // The map is read again in the background: a later read finds the owner.
  const auto until = std::chrono::steady_clock::now() + Scaled(3s);
  while (st.code() == StatusCode::kUnavailable && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
    st = ReadOne(*tier, block);
  }
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(s.gets->load(), 1);
  tier->Shutdown();
}

// Re-reading the map may wait on a node that does not answer; a read of a
// slot without a master must not: it fails at once, on the caller's thread.
TEST(RedisFailover, SlotWithoutAMasterFailsWithoutWaitingForTheMap) {
  Node s = Node::Start();
  std::unique_ptr<Tier> tier;
  uint64_t block = 0;
  ASSERT_NO_FATAL_FAILURE(OpenWithoutLowerSlots(s, &tier, &block));
  s.SetSlots("");  // CLUSTER SLOTS now goes unanswered, for op_timeout_ms
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(kPastRefreshInterval);
    const auto start = std::chrono::steady_clock::now();
    const Status st = ReadOne(*tier, block);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(200ms))
        << "the read waited for the slot map";
  }
  tier->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
