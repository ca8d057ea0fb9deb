#include "tiers/remote/remote_tier.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/ns_key.h"
#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_client.h"
#include "tiers/remote/remote_routing.h"

namespace kvtier::internal {
namespace {

using memd::ItemDone;
using memd::RemoteClient;

// A batch split over servers: each item is set once, the last one finishes.
struct Batch {
  Batch(CompletionSource src, size_t n) : source(std::move(src)), left(n) {}
  CompletionSource source;
  std::atomic<size_t> left;
  void Set(size_t i, const Status& s, uint64_t bytes) {
    source.Set(i, s, bytes);
    if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) source.Finish();
  }
};

// Hands a device opened already to the client, which asks its factory once.
memd::RdmaDeviceFactory HandOn(std::unique_ptr<memd::RdmaDevice> device) {
  auto held = std::make_shared<std::unique_ptr<memd::RdmaDevice>>(std::move(device));
  return [held]() -> Result<std::unique_ptr<memd::RdmaDevice>> {
    if (!*held) return Status::Internal("the RDMA device was handed on already");
    return std::move(*held);
  };
}

using FullKey = internal::NsKey;
using FullKeyHash = internal::NsKeyHash;

class RemoteTier final : public Tier {
 public:
  RemoteTier(const TierOptions& o, const TierContext& context)
      : Tier(o.name, "remote", Caps(context.block_bytes)),
        capacity_(o.capacity_bytes),
        block_(context.block_bytes),
        copies_lost_(context.copies_lost) {
    for (const std::string& s : o.servers) ids_.push_back(memd::ServerId(s));
  }
  ~RemoteTier() override { Shutdown(); }

  void SetClient(std::unique_ptr<RemoteClient> c) { client_ = std::move(c); }
  void ForgetServer(size_t server);

  TierUsage Usage() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return {capacity_, used_, index_.size()};
  }

 protected:
  void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) override;
  void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) override;
  void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    KeyOp(ns, keys, std::move(done), true);
  }
  void DoContains(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    KeyOp(ns, keys, std::move(done), false);
  }
  void DoShutdown() override {
    if (client_) client_->Shutdown();
  }
  // Blocks another process stored that the runtime adopted: this process
  // now counts them (a block's payload each) and will evict them itself.
  void DoClaim(NamespaceId ns, std::span<const BlockKey> keys) override;
  // transport: rdma registers the hub arena so blocks move without staging.
  uint64_t DoRegisterHostMemory(std::span<std::byte> memory) override {
    return client_ ? client_->RegisterHostMemory(memory) : 0;
  }

 private:
  struct Held {
    size_t server;
    uint64_t bytes;
    uint32_t writing = 0;  // writes in flight: a miss or restart seen now predates them
    uint64_t seq = 0;      // number of the last write's admission or landing
    // The copy on the server as far as known (the last write that landed):
    // what the count falls back to when the writes in flight fail.
    bool stored = false;
    uint64_t stored_bytes = 0;
  };
  static TierCapabilities Caps(uint64_t max_block) {
    TierCapabilities c;
    c.shared = true;
    c.checksummed = true;
    c.max_block_bytes = max_block;
    return c;
  }
  // Items of a batch grouped by server: positions in the batch.
  std::vector<std::vector<size_t>> Group(NamespaceId ns, size_t n,
                                         const std::function<BlockKey(size_t)>& key) const {
    std::vector<std::vector<size_t>> g(ids_.size());
    for (size_t i = 0; i < n; ++i) g[memd::PickServer(ns, key(i), ids_)].push_back(i);
    return g;
  }
  // Drops a key from the count unless a write of it is in flight or was
  // admitted at or after `before` (a miss seen by an older read); with a
  // write in flight, only its stored copy is forgotten.
  void Forget(NamespaceId ns, const BlockKey& key, uint64_t before = UINT64_MAX);
  // A write of `bytes` finished: once no other write of the key is in
  // flight, the key counts with the last copy that landed, or not at all.
  void Written(NamespaceId ns, const BlockKey& key, bool ok, uint64_t bytes);
  void KeyOp(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done, bool remove);

  const uint64_t capacity_;
  const uint64_t block_;  // payload bytes of one block
  const std::function<void(NamespaceId, std::span<const BlockKey>)> copies_lost_;
  std::vector<uint64_t> ids_;
  std::unique_ptr<RemoteClient> client_;
  mutable std::mutex mu_;
  std::unordered_map<FullKey, Held, FullKeyHash> index_;  // guarded by mu_
  uint64_t used_ = 0;                                     // guarded by mu_
  uint64_t seq_ = 0;                                      // guarded by mu_
};

void RemoteTier::Forget(NamespaceId ns, const BlockKey& key, uint64_t before) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(FullKey{ns, key});
  if (it == index_.end() || it->second.seq >= before) return;
  if (it->second.writing > 0) {
    it->second.stored = false;  // a failing write has no copy to fall back to
    return;
  }
  used_ -= it->second.bytes;
  index_.erase(it);
}

void RemoteTier::DoClaim(NamespaceId ns, std::span<const BlockKey> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const BlockKey& key : keys) {
    auto [it, fresh] = index_.try_emplace(FullKey{ns, key});
    if (!fresh) continue;  // written (or claimed) here already
    Held& h = it->second;
    h.server = memd::PickServer(ns, key, ids_);
    h.bytes = h.stored_bytes = block_;
    h.stored = true;
    h.seq = ++seq_;
    used_ += block_;
  }
}

void RemoteTier::Written(NamespaceId ns, const BlockKey& key, bool ok, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(FullKey{ns, key});
  if (it == index_.end()) return;
  Held& h = it->second;
  // A read issued before this moment may have missed the block: its miss
  // must not drop the count (see Forget).
  h.seq = ++seq_;
  if (ok) {
    h.stored = true;
    h.stored_bytes = bytes;
  }
  if (--h.writing > 0) return;
  if (!h.stored) {
    used_ -= h.bytes;
    index_.erase(it);
    return;
  }
  // A failed rewrite leaves the server's older copy, which still counts.
  used_ = used_ - h.bytes + h.stored_bytes;
  h.bytes = h.stored_bytes;
}

void RemoteTier::ForgetServer(size_t server) {
  std::unordered_map<uint64_t, std::vector<BlockKey>> lost;  // namespace id -> keys
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = index_.begin(); it != index_.end();) {
      if (it->second.server != server) {
        ++it;
      } else if (it->second.writing > 0) {
        it->second.stored = false;  // the restart took the copy a failing write would keep
        ++it;
      } else {
        used_ -= it->second.bytes;
        lost[it->first.ns.value].push_back(it->first.key);
        it = index_.erase(it);
      }
    }
  }
  if (!copies_lost_) return;
  for (const auto& [ns, keys] : lost) copies_lost_(NamespaceId{ns}, keys);
}

void RemoteTier::DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) {
  auto batch = std::make_shared<Batch>(std::move(done), ops.size());
  std::vector<std::vector<memd::PutOp>> puts(ids_.size());
  std::vector<std::vector<size_t>> where(ids_.size());
  {
    // Capacity is admitted in batch order, before anything is sent.
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < ops.size(); ++i) {
      const size_t s = memd::PickServer(ns, ops[i].key, ids_);
      const uint64_t bytes = ops[i].src.size();
      auto [it, fresh] = index_.try_emplace(FullKey{ns, ops[i].key}, Held{s, 0});
      const uint64_t old = it->second.bytes;
      if (used_ - old + bytes > capacity_) {
        if (fresh) index_.erase(it);
        batch->Set(i, Status::ResourceExhausted("remote tier '" + name() + "' is full"), 0);
        continue;
      }
      used_ = used_ - old + bytes;
      it->second.bytes = bytes;
      it->second.writing += 1;
      it->second.seq = ++seq_;
      puts[s].push_back({ops[i].key, ops[i].src, ops[i].checksum});
      where[s].push_back(i);
    }
  }
  for (size_t s = 0; s < puts.size(); ++s) {
    if (puts[s].empty()) continue;
    std::vector<std::pair<BlockKey, uint64_t>> keys;
    for (const auto& p : puts[s]) keys.emplace_back(p.key, p.payload.size());
    // A block that did not land leaves the count, unless an older copy stays.
    client_->Put(s, ns, std::move(puts[s]),
                 [this, batch, ns, where = std::move(where[s]), keys = std::move(keys)](
                     size_t item, const Status& st, uint64_t bytes) {
                   Written(ns, keys[item].first, st.ok(), keys[item].second);
                   batch->Set(where[item], st, bytes);
                 });
  }
}

void RemoteTier::DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) {
  auto batch = std::make_shared<Batch>(std::move(done), ops.size());
  uint64_t issued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    issued = seq_ + 1;
  }
  auto groups = Group(ns, ops.size(), [&](size_t i) { return ops[i].key; });
  for (size_t s = 0; s < groups.size(); ++s) {
    if (groups[s].empty()) continue;
    std::vector<std::span<std::byte>> dsts;
    std::vector<BlockKey> keys;
    for (size_t i : groups[s]) {
      dsts.push_back(ops[i].dst);
      keys.push_back(ops[i].key);
    }
    client_->Get(s, ns, std::move(dsts), keys,
                 [this, batch, ns, issued, where = groups[s], keys](size_t item, const Status& st,
                                                                    uint64_t bytes) {
                   // The server evicted it (or lost it): it no longer counts,
                   // unless it was written again since this read went out.
                   if (st.code() == StatusCode::kNotFound) Forget(ns, keys[item], issued);
                   batch->Set(where[item], st, bytes);
                 });
  }
}

void RemoteTier::KeyOp(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done,
                       bool remove) {
  auto batch = std::make_shared<Batch>(std::move(done), keys.size());
  auto groups = Group(ns, keys.size(), [&](size_t i) { return keys[i]; });
  for (size_t s = 0; s < groups.size(); ++s) {
    if (groups[s].empty()) continue;
    std::vector<BlockKey> mine;
    for (size_t i : groups[s]) mine.push_back(keys[i]);
    ItemDone cb = [this, batch, ns, remove, where = groups[s], mine](size_t item, const Status& st,
                                                                     uint64_t) {
      if (remove && st.ok()) Forget(ns, mine[item]);
      batch->Set(where[item], st, 0);
    };
    if (remove) {
      client_->Remove(s, ns, std::move(mine), std::move(cb));
    } else {
      client_->Exists(s, ns, std::move(mine), std::move(cb));
    }
  }
}

}  // namespace

Result<std::unique_ptr<Tier>> NewRemoteTier(const TierOptions& options,
                                            const TierContext& context) {
  return NewRemoteTierOn(options, context, memd::OpenRdmaDevice);
}

Result<std::unique_ptr<Tier>> NewRemoteTierOn(const TierOptions& options,
                                              const TierContext& context,
                                              memd::RdmaDeviceFactory open_device) {
  const std::string who = "tier '" + options.name + "': ";
  if (options.servers.empty()) {
    return Status::InvalidArgument(who + "type remote needs servers (kvtier-memd host:port)");
  }
  // The device is opened here, once, so that its absence is reported as
  // this tier's error before anything else is tried; the client takes it.
  memd::RemoteClientOptions co;
  if (options.remote.transport == "rdma") {
    auto device = open_device();
    if (!device.ok()) return device.status().WithContext(who.substr(0, who.size() - 2));
    co.rdma_device = HandOn(std::move(device).value());
  }
  co.transport = options.remote.transport;
  co.servers = options.servers;
  co.secret = options.remote.secret;
  if (co.secret.empty()) {
    auto secret = memd::ReadSecretFile(options.remote.secret_file);
    if (!secret.ok()) return secret.status().WithContext(who.substr(0, who.size() - 2));
    co.secret = *secret;
  }
  co.connections = options.remote.connections;
  co.connect_timeout_ms = options.remote.connect_timeout_ms;
  co.op_timeout_ms = options.remote.op_timeout_ms;
  co.reconnect_backoff_ms = options.remote.reconnect_backoff_ms;
  co.reconnect_backoff_max_ms = options.remote.reconnect_backoff_max_ms;
  co.clock = context.clock;
  auto tier = std::make_unique<RemoteTier>(options, context);
  RemoteTier* raw = tier.get();
  KVTIER_ASSIGN_OR_RETURN(
      std::unique_ptr<RemoteClient> client,
      RemoteClient::Create(co, context.log, [raw](size_t server) { raw->ForgetServer(server); }));
  // Reach every server once: a wrong secret or a block that fits no slot is
  // a configuration error; a server that is merely down is not.
  size_t reachable = 0;
  uint64_t slots = 0;  // on the servers that answered
  Status last;
  for (size_t s = 0; s < client->server_count(); ++s) {
    Result<memd::Stats> st = client->GetStats(s);
    if (!st.ok()) {
      if (st.status().code() == StatusCode::kInvalidArgument) {
        client->Shutdown();
        return st.status().WithContext(who.substr(0, who.size() - 2));
      }
      context.log->Log(LogLevel::kWarning, who + st.status().ToString());
      last = st.status();
      continue;
    }
    if (st->slot_bytes < context.block_bytes + kBlockHeaderBytes) {
      client->Shutdown();
      return Status::InvalidArgument(
          who + "blocks of " + std::to_string(context.block_bytes) + " bytes do not fit the " +
          std::to_string(st->slot_bytes) + "-byte slots of " + client->endpoint(s) +
          "; start kvtier-memd with --slot-size of at least block size + 64");
    }
    ++reachable;
    slots += st->slot_count;
  }
  // The servers evict on their own once their slots run out (earlier, at
  // their watermarks): a tier counting more blocks than they hold would go
  // on reporting blocks they evicted, until each is read and missed.
  const uint64_t tier_blocks = options.capacity_bytes / context.block_bytes;
  if (reachable == client->server_count() && tier_blocks > slots) {
    context.log->Log(LogLevel::kWarning,
                     who + "capacity holds " + std::to_string(tier_blocks) +
                         " blocks, but its kvtier-memd servers have " + std::to_string(slots) +
                         " slots in all: they will evict blocks this tier still counts, and "
                         "lookups report those as hits until a load misses them; set capacity "
                         "to at most " +
                         std::to_string(slots * context.block_bytes) +
                         " bytes, or give the servers more --pool-size");
  }
  if (reachable == 0) {
    client->Shutdown();
    return Status::Unavailable(who + "no kvtier-memd server answered: " + last.ToString());
  }
  tier->SetClient(std::move(client));
  return std::unique_ptr<Tier>(std::move(tier));
}

}  // namespace kvtier::internal
