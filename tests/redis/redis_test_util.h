// Helpers shared by the Redis tier tests: a server started once per test
// process, and tier options pointing at given servers with a key prefix of
// their own so tests never see each other's keys.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/tier.h"
#include "tests/support/block_data.h"
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

// A tier on `o`, or null after a test failure saying why.
inline std::unique_ptr<Tier> OpenRedisTier(const TierOptions& o, uint64_t block_bytes) {
  auto t = MakeRedisTier(o, block_bytes);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// One read of block TestKey(i) in `ns` into *out (resized to `block_bytes`):
// the status it ended with, or DeadlineExceeded when it took over 5 s.
inline Status ReadOneBlock(Tier& tier, NamespaceId ns, uint64_t i, uint64_t block_bytes,
                           std::vector<std::byte>* out) {
  out->assign(block_bytes, std::byte{0});
  ReadOp rd{TestKey(i), *out};
  Completion c = tier.Read(ns, std::span(&rd, 1));
  Status st = c.WaitFor(std::chrono::seconds(5));
  return st.code() == StatusCode::kDeadlineExceeded ? st : c.result(0);
}

}  // namespace kvtier::testing
