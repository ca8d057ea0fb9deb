// Helpers shared by the Redis tier tests: a server started once per test
// process, and tier options pointing at given servers with a key prefix of
// their own so tests never see each other's keys.
#pragma once

#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/tier.h"
#include "tests/support/redis_server.h"

namespace kvtier::testing {

// A plain server shared by the tests of this process; null (with the reason
// in *why) when it cannot start.
inline RedisServer* SharedRedis(std::string* why = nullptr) {
  static std::unique_ptr<RedisServer> server;
  static std::string failure;
  if (!server && failure.empty()) {
    auto s = RedisServer::Start();
    if (s.ok()) {
      server = std::move(s).value();
    } else {
      failure = s.status().ToString();
    }
  }
  if (why != nullptr) *why = failure;
  return server.get();
}

inline std::string UniquePrefix(const std::string& base) {
  static std::atomic<int> next{0};
  return base + std::to_string(getpid()) + "-" + std::to_string(next.fetch_add(1));
}

inline TierOptions RedisTierOptionsFor(std::vector<std::string> servers, uint64_t capacity_bytes,
                                       bool cluster = false) {
  TierOptions o;
  o.name = "redis";
  o.type = "redis";
  o.capacity_bytes = capacity_bytes;
  o.servers = std::move(servers);
  o.redis.cluster = cluster;
  o.redis.key_prefix = UniquePrefix("t");
  return o;
}

inline Result<std::unique_ptr<Tier>> MakeRedisTier(const TierOptions& o, uint64_t block_bytes) {
  TierContext ctx;
  ctx.block_bytes = block_bytes;
  return CreateTier(o, ctx);
}

}  // namespace kvtier::testing
