#include "tiers/redis/redis_tier.h"

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/ns_key.h"
#include "kvtier/block_header.h"
#include "tiers/redis/redis_router.h"

namespace kvtier::internal {
namespace {

// Redirects one op may follow before it fails; a healthy cluster needs two
// at most (MOVED to the new owner, ASK during a migration).
constexpr uint8_t kMaxRedirects = 5;
// A node's share of a batch is split over its connections, but never into
// jobs smaller than this.
constexpr size_t kMinOpsPerJob = 4;

class RedisTier;

// One Read/Write/Remove/Contains call in flight: the jobs it was split into
// and the completion that finishes when the last of them is delivered.
class Batch final : public RedisBatch, public std::enable_shared_from_this<Batch> {
 public:
  // `issued_at`: the tier's write clock when a read batch (GET, EXISTS) is
  // issued; see RedisTier::FoundMissing.
  Batch(RedisTier* tier, NamespaceId ns, RedisOp::Kind kind, CompletionSource done,
        uint64_t issued_at = 0)
      : tier_(tier), ns_(ns), kind_(kind), issued_at_(issued_at), done_(std::move(done)) {
    if (kind_ == RedisOp::Kind::kSet) owed_ = std::make_unique<Owed[]>(done_.size());
  }
  // Memory ran out on the way (a worker drops the job it was running, a
  // DoWrite throws after its reservations): the SETs never settled end as
  // failed in the tier's count before the completion answers them
  // (Cancelled), or their keys would stay counted as being written.
  ~Batch() override;

  NamespaceId ns() const override { return ns_; }
  RedisOp::Kind kind() const { return kind_; }
  uint64_t issued_at() const { return issued_at_; }
  CompletionSource& done() { return done_; }
  // Item `i`'s SET is accounted under record `account`: ended by Settle or,
  // failing that, by the destructor.
  void Owe(size_t i, const BlockKey& block, uint64_t account) {
    owed_[i] = Owed{block, account, true};
  }
  void Settled(size_t i) {
    if (owed_) owed_[i].open = false;
  }

  void Deliver(RedisNode* node, std::vector<RedisOp> ops,
               std::vector<RedisOpResult> results) override;
  // Routes ops to their nodes and submits them as jobs.
  void Dispatch(std::vector<RedisOp> ops);
  void Release() {
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.Finish();
  }

 private:
  void SubmitGroup(RedisNode* node, std::vector<RedisOp> ops);

  RedisTier* const tier_;
  const NamespaceId ns_;
  const RedisOp::Kind kind_;
  const uint64_t issued_at_;
  CompletionSource done_;
  struct Owed {
    BlockKey block;
    uint64_t account = 0;
    bool open = false;  // written by the one thread settling the item
  };
  std::unique_ptr<Owed[]> owed_;  // kSet: one per item
  // Jobs not yet delivered, plus one held by whoever is dispatching.
  std::atomic<int> pending_{1};
};

class RedisTier final : public Tier {
 public:
  RedisTier(const TierOptions& options, uint64_t block_bytes, std::unique_ptr<RedisRouter> router)
      : Tier(options.name, "redis",
             TierCapabilities{.shared = true,
                              .checksummed = true,
                              .max_block_bytes = router->max_value_bytes() - kBlockHeaderBytes,
                              .expiry_ms = options.redis.ttl_s * 1000}),
        options_(options),
        block_bytes_(block_bytes),
        router_(std::move(router)) {}
  ~RedisTier() override { Shutdown(); }

  TierUsage Usage() const override {
    std::lock_guard lock(usage_mu_);
    return {options_.capacity_bytes, used_bytes_, held_.size()};
  }
  uint64_t WriteClock() const {
    std::lock_guard lock(usage_mu_);
    return write_clock_;
  }

  RedisRouter& router() { return *router_; }
  // Records the outcome of one op in the usage count and the completion.
  void Settle(Batch& batch, const RedisOp& op, RedisOpResult result);
  // A SET of `k` under record `account` that never settled failed.
  void AbandonWrite(const NsKey& k, uint64_t account) { WriteEnded(k, account, false); }

 protected:
  void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) override;
  void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) override;
  void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override;
  void DoContains(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override;
  void DoShutdown() override { router_->Shutdown(); }
  // Blocks another process stored that the runtime adopted: this process
  // now counts them (a block's payload each) and will evict them itself.
  void DoClaim(NamespaceId ns, std::span<const BlockKey> keys) override;

 private:
  RedisOp MakeOp(RedisOp::Kind kind, NamespaceId ns, const BlockKey& key, size_t index) const {
    RedisOp op;
    op.kind = kind;
    op.index = static_cast<uint32_t>(index);
    op.block = key;
    op.key = RedisBlockKeyName(options_.redis.key_prefix, ns, key);
    return op;
  }
  void RunKeys(RedisOp::Kind kind, NamespaceId ns, std::span<const BlockKey> keys,
               CompletionSource done);
  // Accounts `bytes` for (ns, key) before its SET, setting *account to the
  // record's id. ResourceExhausted when a new key does not fit.
  Status Reserve(const NsKey& k, uint64_t bytes, uint64_t* account);
  // A SET of `k`, accounted under record `account`, ended. Once none is
  // running, a key no SET has stored is freed: the writes of it (several,
  // in one batch or in overlapping ones) all failed. A SET of a record
  // removed since (a DEL settled while it ran) counts for none: the key's
  // newer record belongs to the writes after that DEL.
  void WriteEnded(const NsKey& k, uint64_t account, bool ok);
  // A read found `k` missing: the server lost it (expired, evicted, or a
  // restart without persistence), unless a SET of it was under way or ended
  // after the read was issued (the read may have overtaken it).
  void FoundMissing(const NsKey& k, uint64_t issued_at);
  void Unaccount(const NsKey& k);  // REQUIRES: usage_mu_ held

  struct Held {
    uint64_t bytes = 0;
    uint32_t writing = 0;     // SETs in flight
    bool stored = false;      // a SET of it succeeded since it was accounted
    uint64_t settled_at = 0;  // write_clock_ when the last SET ended
    uint64_t id = 0;          // from next_account_: this record, not the key's next one
  };
  const TierOptions options_;
  const uint64_t block_bytes_;
  std::unique_ptr<RedisRouter> router_;
  mutable std::mutex usage_mu_;
  std::unordered_map<NsKey, Held, NsKeyHash> held_;  // guarded by usage_mu_
  uint64_t used_bytes_ = 0;                          // guarded by usage_mu_
  uint64_t write_clock_ = 0;                         // guarded: counts ended SETs
  uint64_t next_account_ = 0;                        // guarded: ids of Held records
};

Batch::~Batch() {
  if (!owed_) return;
  for (size_t i = 0; i < done_.size(); ++i) {
    if (owed_[i].open) tier_->AbandonWrite(NsKey{ns_, owed_[i].block}, owed_[i].account);
  }
}

void Batch::Dispatch(std::vector<RedisOp> ops) {
  RedisRouter& router = tier_->router();
  std::map<RedisNode*, std::vector<RedisOp>> groups;
  bool refresh = false;
  for (RedisOp& op : ops) {
    RedisNode* node = router.Route(op.key);
    if (node == nullptr) {
      // A slot without a master: the map was read while the cluster was
      // changing. It is read again in the background (this runs on the
      // caller's thread, which must not wait for connects); the op fails.
      refresh = true;
      tier_->Settle(
          *this, op,
          RedisOpResult{Status::Unavailable("no redis cluster node serves the slot of " + op.key +
                                            "; the slot map is being read again")});
      continue;
    }
    groups[node].push_back(std::move(op));
  }
  if (refresh) router.RequestRefresh();
  for (auto& [node, group] : groups) SubmitGroup(node, std::move(group));
}

void Batch::SubmitGroup(RedisNode* node, std::vector<RedisOp> ops) {
  const size_t jobs =
      std::max<size_t>(1, std::min(node->connections(), ops.size() / kMinOpsPerJob));
  const size_t per_job = (ops.size() + jobs - 1) / jobs;
  for (size_t begin = 0; begin < ops.size(); begin += per_job) {
    const size_t end = std::min(ops.size(), begin + per_job);
    RedisJob job{shared_from_this(), {}};
    job.ops.assign(std::make_move_iterator(ops.begin() + begin),
                   std::make_move_iterator(ops.begin() + end));
    pending_.fetch_add(1, std::memory_order_acq_rel);
    node->Submit(std::move(job));
  }
}

void Batch::Deliver(RedisNode* node, std::vector<RedisOp> ops, std::vector<RedisOpResult> results) {
  RedisRouter& router = tier_->router();
  std::map<RedisNode*, std::vector<RedisOp>> redirected;
  std::vector<size_t> lost;  // ops whose node could not be reached
  bool moved = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    RedisOpResult& r = results[i];
    if (r.unreachable && router.cluster() && ops[i].redirects < kMaxRedirects) {
      lost.push_back(i);
      continue;
    }
    if (r.redirected && ops[i].redirects < kMaxRedirects) {
      moved |= !r.asking;
      Result<RedisNode*> target = router.RedirectTarget(r.target);
      if (target.ok() && *target != nullptr) {
        ops[i].asking = r.asking;
        ++ops[i].redirects;
        redirected[*target].push_back(std::move(ops[i]));
        continue;
      }
      r.status = Status::Unavailable(
          std::string(r.status.message()) + "; not followed: " +
          (target.ok() ? r.target.ToString() + " is not a master the cluster names"
                       : std::string(target.status().message())));
    }
    tier_->Settle(*this, ops[i], std::move(r));
  }
  if (!lost.empty()) {
    // A dead master sends no MOVED: ask the other nodes who owns its slots
    // now (a replica may have taken over), and send each op where its slot
    // went. Each such move counts as a redirect, which bounds them.
    router.RefreshSlots(node);
    for (size_t i : lost) {
      RedisNode* owner = router.Route(ops[i].key);
      if (owner == nullptr || owner == node) {
        tier_->Settle(*this, ops[i], std::move(results[i]));
        continue;
      }
      ops[i].asking = false;
      ++ops[i].redirects;
      redirected[owner].push_back(std::move(ops[i]));
    }
  } else if (moved) {
    // A MOVED means the slot map is stale; ASK is a one-off during migration.
    router.RefreshSlots();
  }
  for (auto& [target, group] : redirected) SubmitGroup(target, std::move(group));
  Release();
}

void RedisTier::Settle(Batch& batch, const RedisOp& op, RedisOpResult result) {
  const NsKey k{batch.ns(), op.block};
  switch (batch.kind()) {
    case RedisOp::Kind::kSet:
      batch.Settled(op.index);
      WriteEnded(k, op.account, result.status.ok());
      break;
    case RedisOp::Kind::kDel:  // unaccounted when it was asked for (DoRemove)
      break;
    case RedisOp::Kind::kGet:
    case RedisOp::Kind::kExists:
      // The runtime forgets a key found missing and never removes it.
      if (result.status.code() == StatusCode::kNotFound) FoundMissing(k, batch.issued_at());
      break;
  }
  batch.done().Set(op.index, std::move(result.status), result.bytes);
}

Status RedisTier::Reserve(const NsKey& k, uint64_t bytes, uint64_t* account) {
  std::lock_guard lock(usage_mu_);
  auto it = held_.find(k);
  if (it != held_.end()) {
    used_bytes_ = used_bytes_ - it->second.bytes + bytes;
    it->second.bytes = bytes;
    ++it->second.writing;
    *account = it->second.id;
    return Status::Ok();
  }
  if (used_bytes_ + bytes > options_.capacity_bytes) {
    return Status::ResourceExhausted("tier '" + name() + "' is full (" +
                                     std::to_string(used_bytes_) + " of " +
                                     std::to_string(options_.capacity_bytes) + " bytes used)");
  }
  *account = ++next_account_;
  held_.emplace(k, Held{.bytes = bytes, .writing = 1, .id = *account});
  used_bytes_ += bytes;
  return Status::Ok();
}

void RedisTier::WriteEnded(const NsKey& k, uint64_t account, bool ok) {
  std::lock_guard lock(usage_mu_);
  auto it = held_.find(k);
  if (it == held_.end() || it->second.id != account) return;  // removed meanwhile
  if (it->second.writing > 0) --it->second.writing;
  it->second.settled_at = ++write_clock_;
  if (ok) it->second.stored = true;
  if (!it->second.stored && it->second.writing == 0) Unaccount(k);
}

void RedisTier::FoundMissing(const NsKey& k, uint64_t issued_at) {
  std::lock_guard lock(usage_mu_);
  auto it = held_.find(k);
  if (it == held_.end() || it->second.writing > 0 || it->second.settled_at > issued_at) return;
  Unaccount(k);
}

void RedisTier::Unaccount(const NsKey& k) {
  auto it = held_.find(k);
  if (it == held_.end()) return;
  used_bytes_ -= it->second.bytes;
  held_.erase(it);
}

void RedisTier::DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) {
  auto batch = std::make_shared<Batch>(this, ns, RedisOp::Kind::kSet, std::move(done));
  std::vector<RedisOp> out;
  out.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    uint64_t account = 0;
    Status st = Reserve(NsKey{ns, ops[i].key}, ops[i].src.size(), &account);
    if (!st.ok()) {
      batch->done().Set(i, std::move(st));
      continue;
    }
    batch->Owe(i, ops[i].key, account);
    RedisOp op = MakeOp(RedisOp::Kind::kSet, ns, ops[i].key, i);
    op.account = account;
    EncodeBlockHeader(MakeBlockHeader(ns, ops[i].key, ops[i].src, ops[i].checksum), op.header);
    op.payload = ops[i].src;
    out.push_back(std::move(op));
  }
  batch->Dispatch(std::move(out));
  batch->Release();
}

void RedisTier::DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) {
  auto batch =
      std::make_shared<Batch>(this, ns, RedisOp::Kind::kGet, std::move(done), WriteClock());
  std::vector<RedisOp> out;
  out.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    RedisOp op = MakeOp(RedisOp::Kind::kGet, ns, ops[i].key, i);
    op.dst = ops[i].dst;
    out.push_back(std::move(op));
  }
  batch->Dispatch(std::move(out));
  batch->Release();
}

void RedisTier::RunKeys(RedisOp::Kind kind, NamespaceId ns, std::span<const BlockKey> keys,
                        CompletionSource done) {
  auto batch = std::make_shared<Batch>(this, ns, kind, std::move(done), WriteClock());
  std::vector<RedisOp> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out.push_back(MakeOp(kind, ns, keys[i], i));
  batch->Dispatch(std::move(out));
  batch->Release();
}

void RedisTier::DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) {
  // Whatever the DELs' outcome, the caller has forgotten the blocks (the
  // runtime drops them from its index before asking, and only retries a DEL
  // later), so their room is freed now, before anything that can fail: a
  // failed DEL leaves at most a key this tier no longer counts, like any
  // other key it cannot see, which a retry, its TTL or the server's
  // eviction removes.
  {
    std::lock_guard lock(usage_mu_);
    for (const BlockKey& key : keys) Unaccount(NsKey{ns, key});
  }
  RunKeys(RedisOp::Kind::kDel, ns, keys, std::move(done));
}

void RedisTier::DoClaim(NamespaceId ns, std::span<const BlockKey> keys) {
  std::lock_guard lock(usage_mu_);
  for (const BlockKey& key : keys) {
    auto [it, fresh] = held_.try_emplace(NsKey{ns, key});
    if (!fresh) continue;  // written (or claimed) here already
    it->second.bytes = block_bytes_;
    it->second.stored = true;
    it->second.settled_at = write_clock_;
    it->second.id = ++next_account_;
    used_bytes_ += block_bytes_;
  }
}

void RedisTier::DoContains(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) {
  RunKeys(RedisOp::Kind::kExists, ns, keys, std::move(done));
}

}  // namespace

Result<std::unique_ptr<Tier>> NewRedisTier(const TierOptions& options, const TierContext& context) {
  if (context.block_bytes + kBlockHeaderBytes > (1ull << 32)) {
    return Status::InvalidArgument("tier '" + options.name + "': block of " +
                                   std::to_string(context.block_bytes) +
                                   " bytes is too large for a redis value");
  }
  auto router = RedisRouter::Open(options, context.log);
  if (!router.ok()) return router.status().WithContext("tier '" + options.name + "'");
  if ((*router)->max_value_bytes() < context.block_bytes + kBlockHeaderBytes) {
    return Status::InvalidArgument(
        "tier '" + options.name + "': a block of " + std::to_string(context.block_bytes) +
        " bytes plus its header exceeds the server's proto-max-bulk-len of " +
        std::to_string((*router)->max_value_bytes()));
  }
  // Redis closes a connection whose unread replies pass the hard limit, so a
  // block whose reply alone does (value, header and RESP framing) could
  // never be read back.
  const uint64_t hard = (*router)->reply_hard_limit();
  if (hard != 0 && context.block_bytes + kBlockHeaderBytes + 32 > hard) {
    return Status::InvalidArgument(
        "tier '" + options.name + "': a block of " + std::to_string(context.block_bytes) +
        " bytes could never be read back: its reply exceeds the server's "
        "client-output-buffer-limit for normal clients (hard limit " +
        std::to_string(hard) + " bytes); raise it or use smaller blocks");
  }
  return std::unique_ptr<Tier>(
      new RedisTier(options, context.block_bytes, std::move(router).value()));
}

}  // namespace kvtier::internal
