// kvtier-inspect redis against a real redis-server the test starts, holding
// blocks written through the Redis tier: exact counts and bytes, sampling,
// passwords and databases in the URL.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "kvtier/tier.h"
#include "tests/inspect/inspect_cli_util.h"
#include "tests/inspect/inspect_test_util.h"
#include "tests/support/redis_server.h"
#include "tools/inspect/redis_url.h"

namespace kvtier::testing {
namespace {

using nlohmann::json;

constexpr uint64_t kBlock = 4096;

// Namespace 0x0a: 3 blocks of 4096 bytes; 0x0b: 2 of 1000.
Status WriteBlocks(const std::string& endpoint, const std::string& prefix, uint32_t db,
                   const std::string& password) {
  TierOptions o;
  o.name = "redis";
  o.type = "redis";
  o.capacity_bytes = 64 * kBlock;
  o.servers = {endpoint};
  o.redis.key_prefix = prefix;
  o.redis.db = db;
  o.redis.password = password;
  KVTIER_ASSIGN_OR_RETURN(auto tier, CreateTier(o, TierContext{kBlock}));
  std::vector<std::byte> full(kBlock, std::byte{7}), part(1000, std::byte{9});
  std::vector<WriteOp> a{{BlockKey{1, 1}, full}, {BlockKey{1, 2}, full}, {BlockKey{1, 3}, full}};
  std::vector<WriteOp> b{{BlockKey{2, 1}, part}, {BlockKey{2, 2}, part}};
  KVTIER_RETURN_IF_ERROR(tier->Write(NamespaceId{0x0a}, a).Wait());
  KVTIER_RETURN_IF_ERROR(tier->Write(NamespaceId{0x0b}, b).Wait());
  tier->Shutdown();
  return Status::Ok();
}

// Whether something accepts connections on [::1]:port (a host without IPv6
// loopback has nothing there).
bool Ipv6LoopbackAnswers(uint16_t port) {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_port = htons(port);
  addr.sin6_addr = in6addr_loopback;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

class InspectRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  }
  CliRun Inspect(const std::string& args) { return RunInspect(dir_.path(), args); }
  TempDir dir_;
};

TEST_F(InspectRedis, CountsEveryBlockAndByteByNamespace) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE(WriteBlocks((*server)->endpoint(), "insp", 0, "").ok());
  // Keys that are not blocks of this prefix: one counted apart, one not seen.
  ASSERT_TRUE((*server)->Command({"SET", "insp:notablock", "x"}).ok());
  ASSERT_TRUE(
      (*server)->Command({"SET", "other:000000000000000a:" + std::string(32, '0'), "x"}).ok());
  const std::string url = "redis://127.0.0.1:" + std::to_string((*server)->port());

  CliRun r = Inspect("redis " + url + " summary --prefix insp --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["blocks"], 5);
  EXPECT_EQ(j["sampled"], 5);
  EXPECT_EQ(j["estimated"], false);
  EXPECT_EQ(j["payload_bytes"], 3 * kBlock + 2 * 1000);
  EXPECT_EQ(j["value_bytes"], 3 * (kBlock + 64) + 2 * (1000 + 64));
  EXPECT_EQ(j["other_keys"], 1);
  EXPECT_EQ(j["bad_headers"], 0);
  EXPECT_EQ(j["namespaces"], json::parse(R"([
      {"id": "000000000000000a", "blocks": 3, "sampled": 3, "estimated": false,
       "value_bytes": 12480, "payload_bytes": 12288},
      {"id": "000000000000000b", "blocks": 2, "sampled": 2, "estimated": false,
       "value_bytes": 2128, "payload_bytes": 2000}])"));
  EXPECT_EQ(j["vanished_keys"], 0);
  EXPECT_EQ(j["repeated_keys"], 0);

  // Sampling: every key is still counted; the bytes are scaled from 2.
  r = Inspect("redis " + url + "/0 summary --prefix insp --sample 2 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["blocks"], 5);
  EXPECT_EQ(j["sampled"], 2);
  EXPECT_EQ(j["estimated"], true);
  // One key measured: the other namespace gets its mean, marked estimated.
  r = Inspect("redis " + url + " summary --prefix insp --sample 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out);
  ASSERT_EQ(j["namespaces"].size(), 2u);
  const json& measured =
      j["namespaces"][0]["sampled"] == 1 ? j["namespaces"][0] : j["namespaces"][1];
  const json& missed = j["namespaces"][0]["sampled"] == 1 ? j["namespaces"][1] : j["namespaces"][0];
  EXPECT_EQ(missed["sampled"], 0);
  EXPECT_EQ(missed["estimated"], true);
  const uint64_t per_block =
      measured["payload_bytes"].get<uint64_t>() / measured["blocks"].get<uint64_t>();
  EXPECT_EQ(missed["payload_bytes"], per_block * missed["blocks"].get<uint64_t>());
  EXPECT_EQ(j["payload_bytes"], per_block * 5);

  r = Inspect("redis " + url + " summary --prefix insp");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')),
            "prefix insp: 5 blocks, 14608 value bytes, 14288 payload bytes");

  // Another prefix holds nothing; a closed port is unreachable (1).
  r = Inspect("redis " + url + " summary --prefix none --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["blocks"], 0);
  (*server)->Kill();
  r = Inspect("redis " + url + " summary --prefix insp");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind("kvtier-inspect redis: unavailable: ", 0), 0u) << r.err;
}

// A Redis Cluster node's SCAN sees only its own keys: its figures would be
// a share of the tier's taken for the whole, so it is refused (exit 2).
TEST_F(InspectRedis, AClusterNodeIsRefusedNotCountedAsTheWhole) {
  auto server = RedisServer::Start({.cluster = true});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string url = "redis://127.0.0.1:" + std::to_string((*server)->port());
  CliRun r = Inspect("redis " + url + " summary --prefix insp --json");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.err.find(" is a Redis Cluster node, whose SCAN sees only its own keys"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(InspectRedis, PasswordAndDatabaseFromTheUrl) {
  auto server = RedisServer::Start({.password = "s3cret"});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE(WriteBlocks((*server)->endpoint(), "kvtier", 3, "s3cret").ok());
  const std::string host = "127.0.0.1:" + std::to_string((*server)->port());

  CliRun r = Inspect("redis redis://:s3cret@" + host + "/3 summary --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["blocks"], 5);
  r = Inspect("redis redis://:s3cret@" + host + " summary --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["blocks"], 0) << "database 0 is empty";
  r = Inspect("redis redis://:wrong@" + host + "/3 summary");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind("kvtier-inspect redis: invalid_argument: ", 0), 0u) << r.err;
  r = Inspect("redis redis://" + host + " summary --prefix ''");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("an empty prefix; expected the tier's key_prefix"), std::string::npos)
      << r.err;
  r = Inspect("redis http://" + host + " summary");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err,
            "kvtier-inspect redis: invalid_argument: redis URL 'http://" + host +
                "': no redis:// scheme; expected redis://[[user]:password@]host[:port][/db]\n");
}

// An IPv6 literal in brackets reaches hiredis without them: "[::1]" was
// looked up as a host name and failed with "Name or service not known".
TEST_F(InspectRedis, Ipv6LiteralInBrackets) {
  // "-::1": listen there too when the host has IPv6 loopback.
  auto server = RedisServer::Start({.extra_args = {"--bind", "127.0.0.1", "-::1"}});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  if (!Ipv6LoopbackAnswers((*server)->port())) GTEST_SKIP() << "no IPv6 loopback";
  ASSERT_TRUE(WriteBlocks((*server)->endpoint(), "kvtier", 0, "").ok());
  CliRun r =
      Inspect("redis 'redis://[::1]:" + std::to_string((*server)->port()) + "/0' summary --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["blocks"], 5);
}

TEST(InspectRedisUrl, HostPortAsTheRedisTierSplitsIt) {
  using inspect::ParseRedisUrl;
  Result<inspect::RedisUrl> u = ParseRedisUrl("redis://[::1]:6390");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 6390);
  EXPECT_EQ(inspect::RedisUrlEndpoint(*u), "[::1]:6390");
  u = ParseRedisUrl("redis://us:pw@[fd00::5]/3");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->host, "fd00::5");
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->db, 3u);
  EXPECT_EQ(u->user, "us");
  EXPECT_EQ(u->password, "pw");
  u = ParseRedisUrl("redis://cache-a:7000/2");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->host, "cache-a");
  EXPECT_EQ(u->port, 7000);
  EXPECT_EQ(u->db, 2u);
  EXPECT_EQ(inspect::RedisUrlEndpoint(*u), "cache-a:7000");
  u = ParseRedisUrl("redis://cache-a");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(inspect::RedisUrlEndpoint(*u), "cache-a:6379");
  const std::pair<const char*, const char*> bad[] = {
      {"redis://[::1:6390", "endpoint '[::1:6390' is not [address]:port"},
      {"redis://[::1]x:6390", "endpoint '[::1]x:6390' is not [address]:port"},
      {"redis://[]", "no host"},
      {"redis://[]:6390", "endpoint '[]:6390' is not [address]:port"},
      {"redis://h:0", "endpoint 'h:0' has a bad port"},
      {"redis://[::1]:70000", "endpoint '[::1]:70000' has a bad port"},
      {"redis://", "no host"},
      {"redis://h/x", "bad database number"},
  };
  for (const auto& [url, why] : bad) {
    u = ParseRedisUrl(url);
    ASSERT_FALSE(u.ok()) << url;
    EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(u.status().message(), std::string("redis URL '") + url + "': " + why +
                                        "; expected redis://[[user]:password@]host[:port][/db]");
  }
}

// A URL that does not parse is echoed in the error without its password.
TEST(InspectRedisUrl, ErrorsNeverShowThePassword) {
  TempDir dir;
  CliRun r = RunInspect(dir.path(), "redis 'redis://u:s3cret@h:abc' summary");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err,
            "kvtier-inspect redis: invalid_argument: redis URL 'redis://u:***@h:abc': endpoint "
            "'h:abc' has a bad port; "
            "expected redis://[[user]:password@]host[:port][/db]\n");
  for (const char* url : {"redis://:s3cret@h/x", "redis://s3cret@h", "http://u:s3cret@h"}) {
    r = RunInspect(dir.path(), std::string("redis '") + url + "' summary --json");
    EXPECT_EQ(r.rc, 2) << url;
    EXPECT_NE(r.err.find("redis URL '"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("s3cret"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("s3cret"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace kvtier::testing
