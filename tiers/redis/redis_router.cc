#include "tiers/redis/redis_router.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <system_error>
#include <utility>

namespace kvtier::internal {
namespace {

constexpr uint64_t kRefreshIntervalNs = 100'000'000;
// The most masters a slot map may name.
constexpr size_t kMaxClusterMasters = 1000;

std::function<void()>& BeforeNewNode() {
  static std::function<void()> hook;
  return hook;
}

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

void TEST_SetBeforeNewRedisNode(std::function<void()> hook) { BeforeNewNode() = std::move(hook); }

uint64_t RedisRouter::max_value_bytes() const {
  return max_value_bytes_read_ == 0 ? kDefaultMaxValueBytes : max_value_bytes_read_;
}

uint64_t RedisRouter::replies_in_flight_bytes() const {
  // Half the smallest limit set: the server also counts its reply buffers'
  // slack, and a soft limit held for its seconds closes the connection too.
  uint64_t limit = reply_hard_limit_;
  if (reply_soft_limit_ != 0 && (limit == 0 || reply_soft_limit_ < limit)) {
    limit = reply_soft_limit_;
  }
  return limit == 0 ? 0 : limit / 2;
}

RedisRouter::RedisRouter(const TierOptions& options, std::shared_ptr<LogSink> log)
    : options_(options.redis), log_(std::move(log)), cluster_(options.redis.cluster) {}

RedisRouter::~RedisRouter() { Shutdown(); }

Result<std::unique_ptr<RedisRouter>> RedisRouter::Open(const TierOptions& options,
                                                       std::shared_ptr<LogSink> log) {
  if (options.servers.empty()) {
    return Status::InvalidArgument("tier '" + options.name +
                                   "': redis tier has no servers; expected 'servers: "
                                   "[\"host:port\"]'");
  }
  std::vector<RedisEndpoint> endpoints;
  for (const std::string& s : options.servers) {
    auto ep = ParseRedisEndpoint(s);
    if (!ep.ok()) return ep.status();
    endpoints.push_back(std::move(ep).value());
  }
  std::unique_ptr<RedisRouter> router(new RedisRouter(options, std::move(log)));
  if (options.redis.tls) {
    auto tls = TlsClientContext::Create(
        {options.redis.tls_ca_file, options.redis.tls_cert_file, options.redis.tls_key_file});
    if (!tls.ok()) return tls.status().WithContext("redis TLS");
    router->tls_ = std::move(tls).value();
  }
  Status st = router->cluster_ ? router->OpenCluster(std::move(endpoints))
                               : router->OpenServers(std::move(endpoints));
  if (!st.ok()) return st;
  // Nodes made before the last server answered took a larger limit.
  std::lock_guard lock(router->nodes_mu_);
  for (auto& [name, node] : router->nodes_) {
    node->LimitRepliesInFlight(router->replies_in_flight_bytes());
  }
  return router;
}

Status RedisRouter::ReadServerLimits(RedisConnection& conn) {
  // CONFIG may be renamed or forbidden by ACLs: then keep Redis's defaults.
  // A reply that does not name the setting asked for is ignored too.
  auto read = [&conn](std::string_view name) -> Result<std::string> {
    std::string_view argv[] = {"CONFIG", "GET", name};
    auto reply = conn.Call(argv, RespLimits{});
    if (!reply.ok()) {
      return reply.status().WithContext("CONFIG GET on redis " + conn.endpoint().ToString());
    }
    if (reply->kind == RespHead::Kind::kArray && reply->items.size() == 2 &&
        reply->items[0].text == name && reply->items[1].kind == RespHead::Kind::kBulk) {
      return reply->items[1].text;
    }
    return std::string();
  };
  // The smallest of every server's: a block goes to whichever the key
  // hashes to.
  auto lower = [](uint64_t* limit, uint64_t v) {
    if (v > 0) *limit = *limit == 0 ? v : std::min(*limit, v);
  };
  auto bulk_len = read("proto-max-bulk-len");
  if (!bulk_len.ok()) return bulk_len.status();
  lower(&max_value_bytes_read_, std::strtoull(bulk_len->c_str(), nullptr, 10));
  auto obuf = read("client-output-buffer-limit");
  if (!obuf.ok()) return obuf.status();
  const OutputBufferLimit normal = ParseNormalOutputBufferLimit(*obuf);
  lower(&reply_hard_limit_, normal.hard_bytes);
  lower(&reply_soft_limit_, normal.soft_bytes);
  return Status::Ok();
}

Status RedisRouter::CheckTtlReads(RedisConnection& conn) {
  if (options_.ttl_s == 0) return Status::Ok();
  std::string_view argv[] = {"INFO", "server"};
  auto reply = conn.Call(argv, RespLimits{});
  if (!reply.ok()) return reply.status().WithContext("INFO on redis " + conn.endpoint().ToString());
  if (reply->kind != RespHead::Kind::kBulk) return Status::Ok();  // a server that does not say
  constexpr std::string_view kField = "redis_version:";
  const size_t at = reply->text.find(kField);
  if (at == std::string::npos) return Status::Ok();
  const char* v = reply->text.c_str() + at + kField.size();
  char* end = nullptr;
  const unsigned long major = std::strtoul(v, &end, 10);
  const unsigned long minor = *end == '.' ? std::strtoul(end + 1, nullptr, 10) : 0;
  if (major > 6 || (major == 6 && minor >= 2)) return Status::Ok();
  return Status::InvalidArgument(
      "redis " + conn.endpoint().ToString() + " is version " + std::to_string(major) + "." +
      std::to_string(minor) +
      ": with ttl_s set, reads refresh the expiry with GETEX, which needs Redis 6.2 or "
      "newer; upgrade the server or set ttl_s: 0");
}

// An ACL may keep the user off the keys under key_prefix, or refuse a
// command the tier runs (GETEX, a write command, for reads with ttl_s set):
// every op would then fail. A read (EXISTS) and a write (DEL) of a key no
// block uses tell both apart without changing anything; only a NOPERM
// answer counts (a MOVED, say, is left to the ops). Refusals of GET or SET
// alone are rarer and named when an op meets them (FromRedisError).
Status RedisRouter::CheckKeyAccess(RedisConnection& conn) {
  const std::string probe = options_.key_prefix + ":access-probe";
  // Each command with its ACL name.
  std::vector<std::pair<std::string_view, std::string_view>> calls = {{"EXISTS", "exists"},
                                                                      {"DEL", "del"}};
  if (options_.ttl_s != 0) calls.emplace_back("GETEX", "getex");
  const std::string user = options_.user.empty() ? "default" : options_.user;
  for (const auto& [name, acl] : calls) {
    const std::string cmd(name);
    std::string_view argv[] = {name, probe};
    auto reply = conn.Call(argv, RespLimits{});
    if (!reply.ok())
      return reply.status().WithContext(cmd + " on redis " + conn.endpoint().ToString());
    if (reply->kind != RespHead::Kind::kError || reply->text.rfind("NOPERM", 0) != 0) continue;
    const std::string who = "redis " + conn.endpoint().ToString() + ": user '" + user + "' ";
    if (reply->text.find("run the") == std::string::npos) {
      return Status::InvalidArgument(
          who + "may not use the keys under key_prefix '" + options_.key_prefix + "' (" +
          reply->text + "); allow them (ACL SETUSER " + user + " ~" + options_.key_prefix +
          ":*) or set key_prefix to one it may use");
    }
    const bool getex = cmd == "GETEX";
    return Status::InvalidArgument(
        who + "may not run " + cmd + ", which " +
        (getex ? "reads use with ttl_s set to refresh the expiry" : "the tier uses") + " (" +
        reply->text + "); allow it (ACL SETUSER " + user + " +" + std::string(acl) + ")" +
        (getex ? " or set ttl_s: 0" : ""));
  }
  return Status::Ok();
}

Status RedisRouter::CheckServer(RedisConnection& conn) {
  KVTIER_RETURN_IF_ERROR(ReadServerLimits(conn));
  KVTIER_RETURN_IF_ERROR(CheckTtlReads(conn));
  return CheckKeyAccess(conn);
}

Status RedisRouter::OpenServers(std::vector<RedisEndpoint> endpoints) {
  Status first_failure;
  size_t reachable = 0;
  std::lock_guard lock(nodes_mu_);
  for (const RedisEndpoint& ep : endpoints) {
    auto conn = RedisConnection::Open(ep, options_, tls_.get());
    // Every server is asked: keys hash to all of them. (One first reached
    // after open is not; a read it cannot serve says why, FromRedisError.)
    if (conn.ok()) {
      if (Status st = CheckServer(**conn); !st.ok()) conn = st;
    }
    // Refused credentials or a bad configuration hold for every server;
    // anything else (full, loading, a bad reply) is this server's, and the
    // node reconnects later.
    if (!conn.ok() && conn.status().code() == StatusCode::kInvalidArgument) return conn.status();
    std::unique_ptr<RedisConnection> c;
    if (conn.ok()) {
      c = std::move(conn).value();
      ++reachable;
    } else {
      if (first_failure.ok()) first_failure = conn.status();
      if (log_) log_->Log(LogLevel::kWarning, std::string(conn.status().message()));
    }
    if (nodes_.count(ep.ToString()) != 0) {
      return Status::InvalidArgument("redis server " + ep.ToString() + " is listed twice");
    }
    servers_.push_back(NodeAtLocked(ep, std::move(c)));
    server_ids_.push_back(RendezvousServerId(ep.ToString()));
  }
  return reachable > 0 ? Status::Ok() : first_failure;
}

Status RedisRouter::OpenCluster(std::vector<RedisEndpoint> seeds) {
  seeds_ = seeds;
  Status first_failure;
  std::string names;
  for (const RedisEndpoint& seed : seeds) {
    names += (names.empty() ? "" : ", ") + seed.ToString();
    auto conn = RedisConnection::Open(seed, options_, tls_.get());
    Status st = conn.status();
    if (st.ok()) st = CheckServer(**conn);
    if (st.ok()) st = LoadSlots(**conn);
    if (st.ok()) return st;
    // As in OpenServers, only what holds for every seed ends the search.
    if (st.code() == StatusCode::kInvalidArgument) return st;
    if (first_failure.ok()) first_failure = st;
    if (log_) log_->Log(LogLevel::kWarning, std::string(st.message()));
  }
  return first_failure.WithContext("redis cluster: no seed gave a slot map (seeds " + names +
                                   "); first failure");
}

// Replaces the slot map with the one `conn`'s server reports.
Status RedisRouter::LoadSlots(RedisConnection& conn) {
  std::string_view argv[] = {"CLUSTER", "SLOTS"};
  const std::string where = "CLUSTER SLOTS on redis " + conn.endpoint().ToString();
  auto reply = conn.Call(argv, kClusterSlotsReplyLimits);
  if (!reply.ok()) return reply.status().WithContext(where);
  if (reply->kind == RespHead::Kind::kError) {
    Status st = FromRedisError(reply->text, where);
    if (reply->text.find("cluster support disabled") != std::string::npos) {
      return Status::InvalidArgument(std::string(st.message()) +
                                     " (the server is not a cluster node; set cluster: false)");
    }
    return st;
  }
  auto ranges = ParseClusterSlots(*reply, conn.endpoint().host);
  if (!ranges.ok()) return ranges.status().WithContext(where);
  // A node not yet given slots (a cluster being set up, a node being
  // reset): another may know the map.
  if (ranges->empty()) {
    return Status::Unavailable(where + ": the slot map is empty (no slot is assigned)");
  }
  // Each master is a node with its own threads: a map naming more than a
  // cluster can have (Redis Cluster is built for about 1,000 nodes) would
  // start tens of thousands of threads on the server's word.
  std::set<std::string> masters;
  for (const SlotRange& r : *ranges) {
    masters.insert(r.master.ToString());
    if (masters.size() > kMaxClusterMasters) {
      return Status::Corruption(where + ": the slot map names more than " +
                                std::to_string(kMaxClusterMasters) + " masters");
    }
  }
  std::set<std::string> listed = ListedMasters(conn);
  std::array<RedisNode*, kRedisClusterSlots> slots{};
  {
    std::lock_guard lock(nodes_mu_);
    for (const SlotRange& r : *ranges) {
      RedisNode* node = NodeAtLocked(r.master);
      for (uint32_t s = r.first; s <= r.last; ++s) slots[s] = node;
    }
    listed_masters_ = std::move(listed);
    last_refresh_ns_ = NowNs();
  }
  std::unique_lock lock(slots_mu_);
  slots_ = slots;
  return Status::Ok();
}

std::set<std::string> RedisRouter::ListedMasters(RedisConnection& conn) {
  std::string_view argv[] = {"CLUSTER", "NODES"};
  auto reply = conn.Call(argv, kClusterNodesReplyLimits);
  Status st = reply.status();
  if (st.ok() && reply->kind != RespHead::Kind::kBulk) {
    st = reply->kind == RespHead::Kind::kError ? FromRedisError(reply->text, "refused")
                                               : Status::Corruption("not a bulk string");
  }
  Result<std::vector<RedisEndpoint>> masters =
      st.ok() ? ParseClusterNodesMasters(reply->text, conn.endpoint().host) : st;
  std::set<std::string> out;
  if (!masters.ok()) {
    if (log_ && !warned_nodes_.exchange(true, std::memory_order_relaxed)) {
      log_->Log(LogLevel::kWarning, "CLUSTER NODES on redis " + conn.endpoint().ToString() + ": " +
                                        std::string(masters.status().message()) +
                                        "; redirects go only to masters that serve slots");
    }
    return out;
  }
  for (const RedisEndpoint& m : *masters) out.insert(m.ToString());
  return out;
}

RedisNode* RedisRouter::NodeAtLocked(const RedisEndpoint& endpoint,
                                     std::unique_ptr<RedisConnection> conn) {
  const std::string name = endpoint.ToString();
  if (auto it = nodes_.find(name); it != nodes_.end()) return it->second.get();
  // Built before it is listed: a node that fails to start (out of memory,
  // no thread) leaves no empty entry for a later refresh to trip over.
  if (BeforeNewNode()) BeforeNewNode()();
  auto node = std::make_unique<RedisNode>(endpoint, options_, tls_, std::move(conn), log_);
  node->LimitRepliesInFlight(replies_in_flight_bytes());
  return nodes_.emplace(name, std::move(node)).first->second.get();
}

RedisNode* RedisRouter::KnownNode(const RedisEndpoint& endpoint) {
  std::lock_guard lock(nodes_mu_);
  auto it = nodes_.find(endpoint.ToString());
  return it == nodes_.end() ? nullptr : it->second.get();
}

// In cluster mode nodes_ holds only masters the cluster reported (slot map
// or CLUSTER NODES), so the nodes, and their threads, are bounded by what the
// cluster says, whatever redirects say.
// It runs on a node's I/O thread, delivering replies: what it throws would
// leave the rest of the batch unsettled.
Result<RedisNode*> RedisRouter::RedirectTarget(const RedisEndpoint& endpoint) noexcept {
  if (!cluster_) return nullptr;
  try {
    if (RedisNode* node = KnownNode(endpoint)) return node;
    RefreshSlots();
    std::lock_guard lock(nodes_mu_);
    const std::string name = endpoint.ToString();
    if (auto it = nodes_.find(name); it != nodes_.end()) return it->second.get();
    return listed_masters_.count(name) != 0 ? NodeAtLocked(endpoint) : nullptr;
  } catch (const std::exception& e) {
    try {
      return Status::Unavailable("could not start a node for " + endpoint.ToString() + ": " +
                                 e.what());
    } catch (...) {  // out of memory for the message
    }
  } catch (...) {
  }
  return Status::Unavailable("could not start a node for the redirect's target");
}

RedisNode* RedisRouter::Route(std::string_view key) {
  if (!cluster_) {
    return servers_.size() == 1 ? servers_[0] : servers_[RendezvousPick(key, server_ids_)];
  }
  std::shared_lock lock(slots_mu_);
  return slots_[RedisHashSlot(key)];
}

void RedisRouter::RefreshSlots(const RedisNode* avoid) noexcept {
  if (!cluster_) return;
  try {
    RefreshSlotsOrThrow(avoid);
  } catch (const std::exception& e) {
    try {
      if (log_) {
        log_->Log(LogLevel::kWarning, std::string("redis cluster: reading the slot map failed: ") +
                                          e.what() + "; the old one stays");
      }
    } catch (...) {  // out of memory for the message
    }
  } catch (...) {
  }
}

void RedisRouter::RefreshSlotsOrThrow(const RedisNode* avoid) {
  std::vector<const RedisNode*> known;
  {
    std::lock_guard lock(nodes_mu_);
    const uint64_t now = NowNs();
    if (now - last_refresh_ns_ < kRefreshIntervalNs) return;
    last_refresh_ns_ = now;
    for (auto& [name, node] : nodes_) known.push_back(node.get());
  }
  std::vector<const RedisNode*> owners;
  {
    std::shared_lock lock(slots_mu_);
    for (const RedisNode* node : slots_) {
      if (node != nullptr && std::find(owners.begin(), owners.end(), node) == owners.end()) {
        owners.push_back(node);
      }
    }
  }
  // Nodes live until Shutdown, so their endpoints can be read unlocked. Old
  // masters, possibly dead, come after the current ones; the seeds last, as
  // they may be all that is left once every master has changed.
  std::vector<RedisEndpoint> candidates;
  std::set<std::string> seen;
  if (avoid != nullptr) seen.insert(avoid->endpoint().ToString());
  auto add = [&](const RedisEndpoint& ep) {
    if (seen.insert(ep.ToString()).second) candidates.push_back(ep);
  };
  for (const RedisNode* node : owners) add(node->endpoint());
  for (const RedisNode* node : known) add(node->endpoint());
  for (const RedisEndpoint& ep : seeds_) add(ep);
  for (const RedisEndpoint& ep : candidates) {
    auto conn = RedisConnection::Open(ep, options_, tls_.get());
    if (conn.ok() && LoadSlots(**conn).ok()) return;
  }
  if (log_) log_->Log(LogLevel::kWarning, "redis cluster: no node answered CLUSTER SLOTS");
}

void RedisRouter::RequestRefresh() {
  if (!cluster_) return;
  std::lock_guard lock(refresh_mu_);
  if (refresh_stop_) return;
  refresh_wanted_ = true;
  if (!refresher_.joinable()) {
    try {
      refresher_ = std::thread([this] { RefreshLoop(); });
    } catch (const std::system_error&) {
      refresh_wanted_ = false;  // no thread now: the next request tries again
      return;
    }
  }
  refresh_cv_.notify_one();
}

void RedisRouter::RefreshLoop() {
  std::unique_lock lock(refresh_mu_);
  for (;;) {
    refresh_cv_.wait(lock, [this] { return refresh_stop_ || refresh_wanted_; });
    if (refresh_stop_) return;
    refresh_wanted_ = false;
    lock.unlock();
    RefreshSlots();  // noexcept: a failure keeps the old map until the next refresh
    lock.lock();
  }
}

void RedisRouter::Shutdown() {
  std::thread refresher;
  {
    std::lock_guard lock(refresh_mu_);
    refresh_stop_ = true;
    refresher.swap(refresher_);
  }
  refresh_cv_.notify_one();
  if (refresher.joinable()) refresher.join();
  std::map<std::string, std::unique_ptr<RedisNode>> nodes;
  {
    std::lock_guard lock(nodes_mu_);
    nodes.swap(nodes_);
  }
  nodes.clear();  // joins every I/O thread
}

}  // namespace kvtier::internal
