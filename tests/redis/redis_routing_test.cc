// Key names, hash slots, rendezvous hashing and option checks of the Redis
// tier; no server needed.
#include "tiers/redis/redis_routing.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <string>
#include <vector>

#include "kvtier/options.h"
#include "kvtier/tier.h"
#include "tiers/redis/redis_connection.h"

namespace kvtier::internal {
namespace {

TEST(RedisRouting, KeyNameFormat) {
  EXPECT_EQ(RedisBlockKeyName("kvtier", NamespaceId{0x1234}, BlockKey{1, 0xabc}),
            "kvtier:0000000000001234:00000000000000010000000000000abc");
}

TEST(RedisRouting, Crc16AndSlotsMatchRedis) {
  EXPECT_EQ(RedisCrc16("123456789"), 0x31C3);
  EXPECT_EQ(RedisHashSlot("foo"), 12182);
  EXPECT_EQ(RedisHashSlot("hello"), 866);
  // Hash tags: the first {...} with something inside decides.
  EXPECT_EQ(RedisHashSlot("{user1000}.following"), RedisHashSlot("user1000"));
  EXPECT_EQ(RedisHashSlot("a{user1000}b{x}"), RedisHashSlot("user1000"));
  EXPECT_EQ(RedisHashSlot("foo{}{bar}"), RedisCrc16("foo{}{bar}") % 16384);
  EXPECT_EQ(RedisHashSlot("foo{{bar}}zap"), RedisHashSlot("{bar"));
  EXPECT_EQ(RedisHashSlot("foo{bar"), RedisCrc16("foo{bar") % 16384);
}

TEST(RedisRouting, RendezvousMovesOnlyTheKeysOfARemovedServer) {
  std::vector<uint64_t> three = {RendezvousServerId("a:1"), RendezvousServerId("b:1"),
                                 RendezvousServerId("c:1")};
  std::vector<uint64_t> two = {three[0], three[2]};
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 3000; ++i) {
    const std::string key = "k" + std::to_string(i);
    const size_t before = RendezvousPick(key, three);
    ++counts[before];
    const size_t after = RendezvousPick(key, two);
    if (before == 0) EXPECT_EQ(after, 0u) << key;
    if (before == 2) EXPECT_EQ(after, 1u) << key;
  }
  for (int c : counts) {
    EXPECT_GT(c, 850);
    EXPECT_LT(c, 1150);
  }
}

TEST(RedisRouting, EndpointsAndRedirects) {
  auto ep = ParseRedisEndpoint("10.0.0.1:7000");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->host, "10.0.0.1");
  EXPECT_EQ(ep->port, 7000);
  EXPECT_EQ(ParseRedisEndpoint("nohost").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRedisEndpoint("h:0").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRedisEndpoint("h:70000").status().code(), StatusCode::kInvalidArgument);
  // An IPv6 literal in brackets reaches hiredis without them; bare, the
  // last colon splits.
  for (const char* text : {"[::1]:6380", "::1:6380"}) {
    auto v6 = ParseRedisEndpoint(text);
    ASSERT_TRUE(v6.ok()) << text << ": " << v6.status().ToString();
    EXPECT_EQ(v6->host, "::1") << text;
    EXPECT_EQ(v6->port, 6380) << text;
  }
  for (const char* bad : {"[::1]", "[::1]6380", "[]:6380", "[::1:6380"}) {
    EXPECT_EQ(ParseRedisEndpoint(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseRedisEndpoint("h:0").status().message(),
            "redis server: endpoint 'h:0' has a bad port; expected host:port or [IPv6]:port, "
            "port 1 to 65535");
  RedisEndpoint target;
  bool asking = true;
  ASSERT_TRUE(ParseRedirect("MOVED 3999 127.0.0.1:6381", &target, &asking));
  EXPECT_FALSE(asking);
  EXPECT_EQ(target.ToString(), "127.0.0.1:6381");
  ASSERT_TRUE(ParseRedirect("ASK 1 h:2", &target, &asking));
  EXPECT_TRUE(asking);
  EXPECT_FALSE(ParseRedirect("ERR wrong", &target, &asking));
  // Redis 7 with an unknown endpoint names the port only.
  ASSERT_TRUE(ParseRedirect("MOVED 3999 :6380", &target, &asking));
  EXPECT_EQ(target.host, "");
  EXPECT_EQ(target.port, 6380);
  EXPECT_FALSE(ParseRedirect("MOVED 3999 :0", &target, &asking));
  EXPECT_FALSE(ParseRedirect("MOVED 3999 :", &target, &asking));
}

// Only exactly ":<port>" is host-less: an IPv6 host starting with ':' is kept.
TEST(RedisRouting, RedirectToAnIpv6HostKeepsTheHost) {
  RedisEndpoint target;
  bool asking = false;
  ASSERT_TRUE(ParseRedirect("MOVED 3999 ::ffff:10.0.0.5:7001", &target, &asking));
  EXPECT_EQ(target.host, "::ffff:10.0.0.5");
  EXPECT_EQ(target.port, 7001);
  ASSERT_TRUE(ParseRedirect("ASK 12 ::1:7002", &target, &asking));
  EXPECT_TRUE(asking);
  EXPECT_EQ(target.host, "::1");
  EXPECT_EQ(target.port, 7002);
}

// Masters in good standing, with or without slots; replicas, failed,
// handshaking and address-less nodes are left out.
TEST(RedisRouting, ClusterNodesNamesItsUsableMasters) {
  const std::string nodes =
      "e7d1 127.0.0.1:30004@40004 master - 0 1 4 connected\n"
      "07c3 10.0.0.2:30001@40001,cache-a myself,master - 0 0 1 connected 0-5460\n"
      "67ed :30002@40002 master - 0 1 2 connected 5461-10922 [5461->-e7d1]\n"
      "292f 10.0.0.3:30003@40003,,shard-id=9a master - 0 1 3 connected 10923-16383\n"
      "6ec2 10.0.0.4:30005@40005 slave 07c3 0 1 1 connected\n"
      "824f 10.0.0.5:30006@40006 master,fail - 1 1 5 disconnected\n"
      "a1b2 10.0.0.6:30007@40007 handshake - 0 0 0 connected\n"
      "c3d4 :0@0 master,noaddr - 1 1 6 disconnected\r\n";
  auto masters = ParseClusterNodesMasters(nodes, "10.0.0.9");
  ASSERT_TRUE(masters.ok()) << masters.status().ToString();
  std::vector<std::string> names;
  for (const RedisEndpoint& m : *masters) names.push_back(m.ToString());
  EXPECT_EQ(names, (std::vector<std::string>{"127.0.0.1:30004", "10.0.0.2:30001", "cache-a:30001",
                                             "10.0.0.9:30002", "10.0.0.3:30003"}));
  auto ipv6 = ParseClusterNodesMasters("ab ::1:7002@17002 master - 0 0 1 connected 0-1\n", "h");
  ASSERT_TRUE(ipv6.ok());
  ASSERT_EQ(ipv6->size(), 1u);
  EXPECT_EQ((*ipv6)[0].host, "::1");
  EXPECT_EQ((*ipv6)[0].port, 7002);
  EXPECT_TRUE(ParseClusterNodesMasters("", "h")->empty());
  EXPECT_EQ(ParseClusterNodesMasters("ab 1.2.3.4:1@2 master\n", "h").status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(
      ParseClusterNodesMasters("ab 1.2.3.4@2 master - 0 0 1 connected\n", "h").status().code(),
      StatusCode::kCorruption);
  EXPECT_EQ(
      ParseClusterNodesMasters("ab 1.2.3.4:0@2 master - 0 0 1 connected\n", "h").status().code(),
      StatusCode::kCorruption);
}

TEST(RedisRouting, OutputBufferLimitOfNormalClients) {
  const OutputBufferLimit set = ParseNormalOutputBufferLimit(
      "normal 4194304 2097152 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60");
  EXPECT_EQ(set.hard_bytes, 4194304u);
  EXPECT_EQ(set.soft_bytes, 2097152u);
  // Redis's default: no limit for normal clients, whatever the others have.
  const OutputBufferLimit none =
      ParseNormalOutputBufferLimit("replica 1 2 3 normal 0 0 0 pubsub 33554432 8388608 60");
  EXPECT_EQ(none.hard_bytes, 0u);
  EXPECT_EQ(none.soft_bytes, 0u);
  // Malformed numbers, a short list or no list at all read as no limit.
  for (const char* text : {"normal 4mb x 60", "normal 5", "", "  ", "pubsub 1 2 3"}) {
    const OutputBufferLimit odd = ParseNormalOutputBufferLimit(text);
    EXPECT_EQ(odd.hard_bytes, 0u) << text;
    EXPECT_EQ(odd.soft_bytes, 0u) << text;
  }
  EXPECT_EQ(ParseNormalOutputBufferLimit("normal  7  0  0").hard_bytes, 7u);
}

TEST(RedisRouting, ErrorRepliesMapToCodes) {
  EXPECT_EQ(FromRedisError("OOM command not allowed", "SET k").code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(FromRedisError("WRONGPASS invalid", "AUTH").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FromRedisError("NOAUTH Authentication required.", "GET k").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(FromRedisError("LOADING Redis is loading", "GET k").code(), StatusCode::kUnavailable);
  EXPECT_EQ(FromRedisError("CLUSTERDOWN The cluster is down", "GET k").code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(FromRedisError("WRONGTYPE Operation against a key", "GET k").code(),
            StatusCode::kCorruption);
  EXPECT_EQ(FromRedisError("ERR Protocol error: invalid bulk length", "SET k").code(),
            StatusCode::kInvalidArgument);
  // A full server may have room once another client leaves.
  EXPECT_EQ(FromRedisError("ERR max number of clients reached", "PING").code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(FromRedisError("ERR unknown", "GET k").ToString(), "io_error: GET k: ERR unknown");
}

TEST(RedisOptions, ValidateNamesTheProblem) {
  RedisTierOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.cluster = true;
  o.db = 2;
  EXPECT_EQ(o.Validate().message(),
            "redis db is 2 with cluster; expected db 0 (a cluster has one database)");
  o = {};
  o.connections = 0;
  EXPECT_EQ(o.Validate().message(), "redis connections is 0; expected 1 to 64");
  o = {};
  o.user = "u";
  EXPECT_EQ(o.Validate().message(), "redis user 'u' has no password; expected both");
  o = {};
  o.key_prefix = "";
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
}

// The config file caps ttl_s at 10 years; options built in code get the same
// bound when the tier is created, before any server is contacted.
TEST(RedisOptions, TierRefusesTtlPastTenYears) {
  TierOptions o;
  o.name = "r";
  o.type = "redis";
  o.capacity_bytes = 1 << 20;
  o.servers = {"127.0.0.1:1"};
  o.redis.ttl_s = 10ull * 365 * 86400 + 1;
  TierContext ctx;
  ctx.block_bytes = 4096;
  auto tier = CreateTier(o, ctx);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().message(),
            "tier 'r': redis ttl_s is 315360001; expected at most 315360000 (10 years), or 0 "
            "for no expiry");
}

}  // namespace
}  // namespace kvtier::internal
