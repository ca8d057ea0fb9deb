// The YAML keys of a redis tier (config/redis_keys.cc).
#include <gtest/gtest.h>

#include <string>

#include "kvtier/config.h"

namespace kvtier {
namespace {

// A config of a host tier and a redis tier `r` of 1 GiB with `keys`, lines
// indented by four spaces, added to r.
Result<KvtierConfig> ParseRedisTier(const std::string& keys) {
  return ParseConfig(
      "tiers:\n  - {name: host, type: host, capacity: 1MiB}\n"
      "  - name: r\n    type: redis\n    capacity: 1GiB\n" +
          keys,
      "t.yaml");
}

TEST(RedisConfig, ReadsEveryRedisKey) {
  auto c = ParseRedisTier(R"(    servers: ["a:1", "b:2"]
    user: kv
    password: pw
    db: 0
    key_prefix: "{kv}"
    ttl_s: 60
    connect_timeout_ms: 10
    op_timeout_ms: 20
    connections: 3
    cluster: true
)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const TierOptions& t = c->runtime.tiers[1];
  EXPECT_EQ(t.servers, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(t.redis.user, "kv");
  EXPECT_EQ(t.redis.password, "pw");
  EXPECT_EQ(t.redis.key_prefix, "{kv}");
  EXPECT_EQ(t.redis.ttl_s, 60u);
  EXPECT_EQ(t.redis.connect_timeout_ms, 10u);
  EXPECT_EQ(t.redis.op_timeout_ms, 20u);
  EXPECT_EQ(t.redis.connections, 3u);
  EXPECT_TRUE(t.redis.cluster);
}

TEST(RedisConfig, ReadsTlsKeys) {
  auto c = ParseRedisTier(R"(    servers: ["redis.example:6380"]
    tls: true
    tls_ca_file: /etc/kvtier/ca.pem
    tls_cert_file: /etc/kvtier/client.pem
    tls_key_file: /etc/kvtier/client.key
    tls_server_name: cache.example
)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const RedisTierOptions& r = c->runtime.tiers[1].redis;
  EXPECT_TRUE(r.tls);
  EXPECT_EQ(r.tls_ca_file, "/etc/kvtier/ca.pem");
  EXPECT_EQ(r.tls_cert_file, "/etc/kvtier/client.pem");
  EXPECT_EQ(r.tls_key_file, "/etc/kvtier/client.key");
  EXPECT_EQ(r.tls_server_name, "cache.example");
  // Off by default, and then no tls_* field is set.
  auto plain = ParseRedisTier("    servers: [\"a:1\"]\n");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->runtime.tiers[1].redis.tls);
  EXPECT_TRUE(plain->runtime.tiers[1].redis.tls_ca_file.empty());
}

TEST(RedisConfig, TlsOptionsAreValidated) {
  RedisTierOptions r;
  r.tls_server_name = "cache.example";
  EXPECT_EQ(r.Validate().code(), StatusCode::kInvalidArgument);  // tls is off
  r.tls = true;
  EXPECT_TRUE(r.Validate().ok());
  r.tls_key_file = "client.key";
  Status no_cert = r.Validate();
  EXPECT_EQ(no_cert.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_cert.message().find("tls_cert_file and tls_key_file"), std::string_view::npos)
      << no_cert.ToString();
  r.tls_cert_file = "client.pem";
  EXPECT_TRUE(r.Validate().ok());
}

TEST(RedisConfig, ErrorsPointAtTheValue) {
  auto bad = ParseConfig(
      "tiers:\n  - {name: host, type: host, capacity: 1MiB}\n"
      "  - {name: r, type: redis, capacity: 1GiB, cluster: true, db: 2}\n",
      "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "t.yaml:3:63: tiers.r: redis db is 2 with cluster; expected db 0 (a cluster has one "
            "database)");
  auto host_key =
      ParseConfig("tiers:\n  - {name: host, type: host, capacity: 1MiB, ttl_s: 5}\n", "t.yaml");
  ASSERT_FALSE(host_key.ok());
  EXPECT_NE(host_key.status().message().find("ttl_s"), std::string_view::npos)
      << host_key.status().ToString();
}

TEST(RedisConfig, ExamplesParse) {
  auto r = LoadConfigFile(KVTIER_SOURCE_DIR "/config/examples/redis.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.tiers[1].redis.ttl_s, 86400u);
  EXPECT_EQ(r->runtime.tiers[1].redis.connections, 4u);
  auto hr = LoadConfigFile(KVTIER_SOURCE_DIR "/config/examples/host-redis.yaml");
  ASSERT_TRUE(hr.ok()) << hr.status().ToString();
  EXPECT_EQ(hr->runtime.tiers[1].servers, std::vector<std::string>{"127.0.0.1:6390"});
  EXPECT_EQ(hr->runtime.tiers[1].redis.ttl_s, 3600u);
}

}  // namespace
}  // namespace kvtier
