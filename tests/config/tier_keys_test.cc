// Keys a tier accepts by type, the servers list of redis and remote tiers,
// and the limits checked against the model (nvme region size) and the
// platform (admin socket path): each refused where the value is written.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvtier/config.h"
#include "tests/config/config_error.h"

namespace kvtier {
namespace {

const std::string kHost = "tiers:\n  - {name: host, type: host, capacity: 1GiB}\n";

std::string RedisServers(const std::string& servers) {
  return kHost + "  - {name: r, type: redis, capacity: 1GiB, servers: " + servers + "}\n";
}

TEST(TierKeysTest, EachTypeTakesOnlyItsOwnKeys) {
  EXPECT_EQ(ErrorOf("tiers:\n  - {name: h, type: host, capacity: 1GiB, region_size: 1MiB}\n"),
            "t.yaml:2:43: tiers.0: key 'region_size' is for tiers of type nvme, not host; "
            "expected for type host one of: name, type, capacity, watermarks, eviction, "
            "admission, policy, hugepages, mlock");
  EXPECT_EQ(ErrorOf(kHost + "  - {name: s, type: nvme, capacity: 1GiB, path: /x, hugepages: "
                            "false}\n"),
            "t.yaml:3:53: tiers.1: key 'hugepages' is for tiers of type host, not nvme; "
            "expected for type nvme one of: name, type, capacity, watermarks, eviction, "
            "admission, policy, path, region_size, io_timeout_ms, queue_depth, max_queued, "
            "index_path, on_mismatch, reclaim, commit_every_blocks, commit_interval_ms, "
            "reinsert_hits, direct_io");
  const std::string servers =
      ErrorOf(kHost + "  - {name: s, type: nvme, capacity: 1GiB, path: /x, servers: [\"a:1\"]}\n");
  EXPECT_EQ(servers.rfind("t.yaml:3:53: tiers.1: key 'servers' is for tiers of type redis, "
                          "remote, not nvme; expected for type nvme one of: ",
                          0),
            0u)
      << servers;
  // A key no type knows stays an unknown key.
  EXPECT_EQ(ErrorOf("tiers:\n  - {name: h, type: host, capacity: 1GiB, colour: red}\n")
                .rfind("t.yaml:2:43: unknown key 'colour' in tiers.0; expected one of: ", 0),
            0u);
  // With no type yet, the missing type is the error, not the other keys.
  EXPECT_EQ(ErrorOf("tiers:\n  - {name: h, capacity: 1GiB, path: /x, mlock: true}\n"),
            "t.yaml:2:5: tiers.h has no 'type'; expected one of: host, nvme, redis, remote");
}

TEST(TierKeysTest, ServersMustBeANonEmptyListOfHostPort) {
  EXPECT_EQ(ErrorOf(RedisServers("[]")),
            "t.yaml:3:53: tiers.r.servers is an empty list; expected at least one "
            "\"host:port\" entry");
  EXPECT_EQ(ErrorOf(RedisServers("\"a:1\"")),
            "t.yaml:3:53: tiers.r.servers is the string \"a:1\"; expected a list of strings");
  // The runtime's parser (SplitHostPort) decides, so an IPv6 literal must
  // be bracketed whole and followed by ":port".
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"nonsense", "endpoint 'nonsense' is not host:port"},
      {":6379", "endpoint ':6379' is not host:port"},
      {"h:", "endpoint 'h:' has a bad port"},
      {"h:0", "endpoint 'h:0' has a bad port"},
      {"h:65536", "endpoint 'h:65536' has a bad port"},
      {"h:63a", "endpoint 'h:63a' has a bad port"},
      {"h:-1", "endpoint 'h:-1' has a bad port"},
      {"[::1:6390", "endpoint '[::1:6390' is not [address]:port"},
      {"[::1]x:6390", "endpoint '[::1]x:6390' is not [address]:port"},
      {"[::1]", "endpoint '[::1]' is not [address]:port"},
      {"[]:6390", "endpoint '[]:6390' is not [address]:port"},
      {"[::1]:", "endpoint '[::1]:' has a bad port"},
      // Hosts no connect could reach: refused here, naming the fix.
      {"::1", "endpoint '::1': not host:port; an IPv6 address goes in brackets: [::1]:6379"},
      {"[fd00::zz]:6390", "endpoint '[fd00::zz]:6390': 'fd00::zz' is not an IPv6 address"},
      {"redis://127.0.0.1:6379",
       "endpoint 'redis://127.0.0.1:6379': a URL; expected host:port without a scheme"},
      {"127.0.0.1:6379,127.0.0.1:6380",
       "endpoint '127.0.0.1:6379,127.0.0.1:6380': holds a ','; list each server as its own "
       "entry"},
      {"127.0.0.1 :6379",
       "endpoint '127.0.0.1 :6379': the host holds ' '; expected a host name or an IP address"},
  };
  for (const auto& [entry, what] : bad) {
    EXPECT_EQ(ErrorOf(RedisServers("[\"" + entry + "\"]")),
              "t.yaml:3:54: tiers.r.servers.0: " + what +
                  "; expected \"host:port\" or \"[IPv6]:port\" with a port from 1 to 65535")
        << entry;
  }
  // A server listed twice, however spelled, would count twice.
  EXPECT_EQ(ErrorOf(RedisServers("[\"a:1\", \"b:1\", \"A:1\"]")),
            "t.yaml:3:68: tiers.r.servers.2: 'A:1' is the server of entry 0 ('a:1') again; "
            "expected each server listed once");
  EXPECT_EQ(ErrorOf(RedisServers("[\"::1:6379\", \"[::1]:6379\"]")),
            "t.yaml:3:66: tiers.r.servers.1: '[::1]:6379' is the server of entry 0 "
            "('::1:6379') again; expected each server listed once");
  Result<KvtierConfig> ok = ParseConfig(
      RedisServers("[\"a:1\", \"redis.example:65535\", \"::1:6379\", \"[::1]:6390\"]"), "t.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->runtime.tiers[1].servers,
            (std::vector<std::string>{"a:1", "redis.example:65535", "::1:6379", "[::1]:6390"}));
}

// `shared` (redis and remote only): true by default; false marks a tier
// only this process writes, which lookup misses then do not ask.
TEST(TierKeysTest, SharedIsABoolOfRedisAndRemoteTiers) {
  Result<KvtierConfig> dflt = ParseConfig(RedisServers("[\"a:1\"]"), "t.yaml");
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_TRUE(dflt->runtime.tiers[1].shared);
  Result<KvtierConfig> off = ParseConfig(
      kHost +
          "  - {name: r, type: redis, capacity: 1GiB, servers: [\"a:1\"], shared: false}\n"
          "  - {name: m, type: remote, capacity: 1GiB, servers: [\"b:1\"], shared: false, "
          "secret_file: /s}\n",
      "t.yaml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->runtime.tiers[1].shared);
  EXPECT_FALSE(off->runtime.tiers[2].shared);
  EXPECT_EQ(ErrorOf(kHost +
                    "  - {name: r, type: redis, capacity: 1GiB, servers: [\"a:1\"], shared: 2}\n"),
            "t.yaml:3:70: tiers.r.shared is '2'; expected true or false");
  EXPECT_EQ(ErrorOf("tiers:\n  - {name: h, type: host, capacity: 1GiB, shared: false}\n")
                .rfind("t.yaml:2:43: tiers.0: key 'shared' is for tiers of type redis, remote, "
                       "not host",
                       0),
            0u);
}

TEST(TierKeysTest, RemoteTierNeedsASecretFile) {
  EXPECT_EQ(ErrorOf(kHost + "  - {name: m, type: remote, capacity: 1GiB, servers: [\"a:1\"]}\n"),
            "t.yaml:3:5: tiers.m is a remote tier without 'secret_file'; expected 'secret_file: "
            "<file holding the kvtier-memd shared secret>'");
}

TEST(TierKeysTest, DefaultRegionTooSmallForTheBlockPointsAtTheTier) {
  // 1024 layers of the tiny preset: 64 MiB blocks, more than the default
  // 64 MiB region once the header page is added.
  EXPECT_EQ(ErrorOf("model: {layers: 1024}\n" + kHost +
                    "  - {name: s, type: nvme, capacity: 1TiB, path: /x}\n"),
            "t.yaml:4:5: tiers.s.region_size 67108864 bytes cannot hold one block of the model "
            "(67108864 bytes, 67112960 on disk with its header page); expected a region_size of "
            "at least 67112960 bytes");
  Result<KvtierConfig> ok = ParseConfig(
      "model: {layers: 1024}\n" + kHost +
          "  - {name: s, type: nvme, capacity: 1TiB, path: /x, region_size: 67112960}\n",
      "t.yaml");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST(TierKeysTest, AdminSocketMustFitASocketAddress) {
  const std::string longest = "/" + std::string(106, 's');  // 107 bytes
  Result<KvtierConfig> ok = ParseConfig("runtime: {admin_socket: " + longest + "}\n" + kHost, "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->runtime.admin_socket, longest);
  EXPECT_EQ(ErrorOf("runtime: {admin_socket: " + longest + "s}\n" + kHost),
            "t.yaml:1:25: runtime.admin_socket is 108 bytes long, too long for a Unix socket "
            "path; expected a path of at most 107 bytes, or \"\" for off");
}

}  // namespace
}  // namespace kvtier
