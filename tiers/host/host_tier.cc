#include "tiers/host/host_tier.h"

#include <cstring>
#include <shared_mutex>
#include <unordered_map>

#include "core/ns_key.h"
#include "tiers/host/host_arena.h"

namespace kvtier::internal {
namespace {

struct Stored {
  uint32_t slot;
  uint64_t bytes;
};

class HostTier final : public Tier {
 public:
  HostTier(const TierOptions& options, std::unique_ptr<HostArena> arena)
      : Tier(options.name, "host",
             TierCapabilities{.max_block_bytes = arena->slot_bytes()}),
        arena_(std::move(arena)) {}

  ~HostTier() override { Shutdown(); }

  TierUsage Usage() const override {
    std::shared_lock lock(mu_);
    return {uint64_t{arena_->slot_count()} * arena_->slot_bytes(),
            uint64_t{arena_->used_slots()} * arena_->slot_bytes(), map_.size()};
  }

 protected:
  // Readers copy under a shared lock. Writers fill a private slot without the
  // lock and publish it under the exclusive lock, where the replaced slot is
  // freed: no reader can be copying from it then.
  void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) override {
    std::shared_lock lock(mu_);
    for (size_t i = 0; i < ops.size(); ++i) {
      auto it = map_.find({ns, ops[i].key});
      if (it == map_.end()) {
        done.Set(i, Status::NotFound("not in tier '" + name() + "'"));
        continue;
      }
      if (ops[i].dst.size() < it->second.bytes) {
        done.Set(i, Status::InvalidArgument("read buffer of " +
                                            std::to_string(ops[i].dst.size()) +
                                            " bytes < block of " +
                                            std::to_string(it->second.bytes)));
        continue;
      }
      std::memcpy(ops[i].dst.data(), arena_->Slot(it->second.slot).data(), it->second.bytes);
      done.Set(i, Status::Ok(), it->second.bytes);
    }
    done.Finish();
  }

  void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) override {
    for (size_t i = 0; i < ops.size(); ++i) {
      std::optional<uint32_t> slot = arena_->Allocate();
      if (!slot) {
        Status st = OverwriteInPlace(ns, ops[i]);
        done.Set(i, st, st.ok() ? ops[i].src.size() : 0);
        continue;
      }
      std::memcpy(arena_->Slot(*slot).data(), ops[i].src.data(), ops[i].src.size());
      std::optional<uint32_t> replaced;
      {
        std::unique_lock lock(mu_);
        // Out of memory for the map's node: the slot goes back before the
        // failure leaves (or the tier would lose it for good).
        struct FreeUnlessKept {
          HostArena& arena;
          uint32_t slot;
          bool kept = false;
          ~FreeUnlessKept() {
            if (!kept) arena.Free(slot);
          }
        } guard{*arena_, *slot};
        auto [it, inserted] = map_.try_emplace({ns, ops[i].key}, Stored{*slot, ops[i].src.size()});
        guard.kept = true;
        if (!inserted) {
          replaced = it->second.slot;
          it->second = Stored{*slot, ops[i].src.size()};
        }
        if (replaced) arena_->Free(*replaced);
      }
      done.Set(i, Status::Ok(), ops[i].src.size());
    }
    done.Finish();
  }

  void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    std::unique_lock lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = map_.find({ns, keys[i]});
      if (it != map_.end()) {
        arena_->Free(it->second.slot);
        map_.erase(it);
      }
      done.Set(i, Status::Ok());
    }
    done.Finish();
  }

  void DoContains(NamespaceId ns, std::span<const BlockKey> keys,
                  CompletionSource done) override {
    std::shared_lock lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      done.Set(i, map_.contains({ns, keys[i]}) ? Status::Ok()
                                               : Status::NotFound("not in tier '" + name() + "'"));
    }
    done.Finish();
  }

 private:
  // A full tier can still replace a stored key: copy over its slot under the
  // exclusive lock, so no reader sees half of it.
  Status OverwriteInPlace(NamespaceId ns, const WriteOp& op) {
    std::unique_lock lock(mu_);
    auto it = map_.find({ns, op.key});
    if (it == map_.end()) {
      return Status::ResourceExhausted("tier '" + name() + "' is full (" +
                                       std::to_string(arena_->slot_count()) + " blocks)");
    }
    std::memcpy(arena_->Slot(it->second.slot).data(), op.src.data(), op.src.size());
    it->second.bytes = op.src.size();
    return Status::Ok();
  }

  std::unique_ptr<HostArena> arena_;
  mutable std::shared_mutex mu_;
  std::unordered_map<NsKey, Stored, NsKeyHash> map_;  // guarded by mu_
};

}  // namespace

Result<std::unique_ptr<Tier>> NewHostTier(const TierOptions& options, const TierContext& context) {
  HostArenaOptions arena_options{.capacity_bytes = options.capacity_bytes,
                                 .slot_bytes = context.block_bytes,
                                 .hugepages = options.hugepages,
                                 .mlock = options.mlock};
  auto arena = HostArena::Create(arena_options, context.log.get());
  if (!arena.ok()) return arena.status().WithContext("tier '" + options.name + "'");
  return std::unique_ptr<Tier>(new HostTier(options, std::move(arena).value()));
}

}  // namespace kvtier::internal
