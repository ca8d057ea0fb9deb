// RedisRouter: which RedisNode answers a key. Three shapes, fixed at open:
//  - one server: every key goes to it;
//  - several independent servers: rendezvous hashing of the key name;
//  - Redis Cluster: the slot map read with CLUSTER SLOTS from a seed, a node
//    per master, refreshed when a MOVED reply shows it is stale, when a
//    master cannot be reached (a dead master sends no MOVED; a replica may
//    have taken its slots), and when a slot has no master. Only what the
//    cluster reports creates nodes: the masters of its slot map and, for a
//    redirect, a master CLUSTER NODES lists without slots (the target of a
//    migration to a node just added); any other redirect is refused.
// Nodes live until Shutdown(), so the pointers handed out stay valid while
// any batch is in flight. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/options.h"
#include "tiers/redis/redis_node.h"
#include "tiers/redis/redis_routing.h"

namespace kvtier::internal {

// Tests only: runs before the router builds a node; may throw what building
// one can (std::system_error, std::bad_alloc). Null: nothing.
void TEST_SetBeforeNewRedisNode(std::function<void()> hook);

class RedisRouter {
 public:
  // Connects to the servers of `options` (their `servers` and `redis`
  // fields). InvalidArgument for bad entries, refused credentials, TLS
  // files that cannot be used or a certificate that fails verification, or
  // a cluster/non-cluster mismatch; any other failure of a server (or seed) is
  // logged and the next one tried. When none can be used (with cluster: no
  // seed gives a slot map with a slot in it), the first failure, naming the
  // seeds with cluster.
  static Result<std::unique_ptr<RedisRouter>> Open(const TierOptions& options,
                                                   std::shared_ptr<LogSink> log);
  ~RedisRouter();

  // The node serving `key`, or null when no node serves its cluster slot.
  RedisNode* Route(std::string_view key);
  // The node a cluster redirect to `endpoint` goes to, or null when it is not
  // to be followed: always without cluster, and when `endpoint` is neither a
  // master of a slot map read from the cluster nor a master its CLUSTER NODES
  // lists (both re-read once, at most every 100 ms, when it is unknown).
  // Redirects thus never make the tier connect to hosts the cluster does not
  // name as its masters, or send them the password. Never throws: a node
  // that cannot be started (no thread, no memory) is Unavailable.
  Result<RedisNode*> RedirectTarget(const RedisEndpoint& endpoint) noexcept;
  bool cluster() const { return cluster_; }
  // Re-reads the cluster slot map (at most every 100 ms) from the first node
  // that answers: the masters of the current map, then those of earlier
  // maps, then the configured servers; never `avoid` (a node that just
  // failed), and at most one connect attempt each. No-op without cluster.
  // Blocks the caller while it connects. Never throws: a refresh that fails
  // (a node of the map cannot be started, memory runs out) is logged, the
  // old map kept.
  void RefreshSlots(const RedisNode* avoid = nullptr) noexcept;
  // RefreshSlots on the router's own thread (started on first use), for a
  // caller that must not block: requests made while one runs coalesce.
  void RequestRefresh();
  // Largest value the servers accept (proto-max-bulk-len; 512 MiB default).
  uint64_t max_value_bytes() const;
  // The hard client-output-buffer-limit of normal clients, the smallest of
  // the servers' (0: none): a reply larger than it closes the connection.
  uint64_t reply_hard_limit() const { return reply_hard_limit_; }
  // Bytes of replies one connection may have asked for and not yet read
  // (0: no limit), well within the servers' output buffer limits.
  uint64_t replies_in_flight_bytes() const;
  // Stops every node's threads. REQUIRES: no batch in flight.
  void Shutdown();

 private:
  RedisRouter(const TierOptions& options, std::shared_ptr<LogSink> log);
  Status OpenServers(std::vector<RedisEndpoint> endpoints);
  Status OpenCluster(std::vector<RedisEndpoint> seeds);
  Status LoadSlots(RedisConnection& conn);
  // RefreshSlots' work; may throw.
  void RefreshSlotsOrThrow(const RedisNode* avoid);
  // The masters `conn`'s server lists in CLUSTER NODES, as "host:port";
  // empty when it refuses (an ACL) or its answer is malformed, which is
  // logged once per tier (refreshes repeat it at every failover).
  std::set<std::string> ListedMasters(RedisConnection& conn);
  RedisNode* NodeAtLocked(const RedisEndpoint& endpoint,
                          std::unique_ptr<RedisConnection> conn = nullptr);
  RedisNode* KnownNode(const RedisEndpoint& endpoint);
  // Reads the server's proto-max-bulk-len and client-output-buffer-limit,
  // keeping the smallest of the servers' (the defaults when none answers
  // CONFIG); fails only with the connection. Read at open only: a limit
  // lowered later on a running server is not seen, and a cluster's limits
  // are those of the seed that gave the slot map (its masters are assumed
  // to be configured alike).
  Status ReadServerLimits(RedisConnection& conn);
  // With ttl_s set, reads are GETEX, which Redis has since 6.2: an older
  // server (by INFO's redis_version) is InvalidArgument, saying so, rather
  // than a tier whose every read fails. A server that does not tell passes;
  // a connection that fails fails it.
  Status CheckTtlReads(RedisConnection& conn);
  // The user may run the commands the tier uses on the keys under
  // key_prefix: InvalidArgument naming the ACL rule that is missing.
  Status CheckKeyAccess(RedisConnection& conn);
  // What every server is asked at open, in order: the three above.
  Status CheckServer(RedisConnection& conn);
  void RefreshLoop();

  const RedisTierOptions options_;
  const std::shared_ptr<LogSink> log_;
  const bool cluster_;
  std::shared_ptr<const TlsClientContext> tls_;  // with options_.tls; set at open
  static constexpr uint64_t kDefaultMaxValueBytes = 512ull << 20;
  // The smallest each server reported, 0 when none did; set at open.
  uint64_t max_value_bytes_read_ = 0;
  uint64_t reply_hard_limit_ = 0;
  uint64_t reply_soft_limit_ = 0;

  std::mutex nodes_mu_;
  std::map<std::string, std::unique_ptr<RedisNode>> nodes_;  // guarded by nodes_mu_
  uint64_t last_refresh_ns_ = 0;                             // guarded by nodes_mu_
  std::set<std::string> listed_masters_;   // of the last CLUSTER NODES; guarded by nodes_mu_
  std::atomic<bool> warned_nodes_{false};  // ListedMasters logged a failure once
  std::vector<RedisEndpoint> seeds_;       // cluster: the configured servers; fixed after open

  std::vector<RedisNode*> servers_;  // non-cluster, in `servers` order; fixed after open
  std::vector<uint64_t> server_ids_;
  mutable std::shared_mutex slots_mu_;
  std::array<RedisNode*, kRedisClusterSlots> slots_{};  // guarded by slots_mu_

  std::mutex refresh_mu_;
  std::condition_variable refresh_cv_;
  bool refresh_wanted_ = false;  // guarded by refresh_mu_
  bool refresh_stop_ = false;    // guarded by refresh_mu_
  std::thread refresher_;        // guarded by refresh_mu_
};

}  // namespace kvtier::internal
