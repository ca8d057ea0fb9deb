// The save path: engine pages -> hub slots, on a worker thread.
#include <future>

#include "core/runtime_impl.h"

namespace kvtier::internal {
namespace {

constexpr std::chrono::seconds kSaveRoomWait(1);

}  // namespace

Status RuntimeImpl::RunCopy(bool gather, std::span<const BlockCopy> copies,
                            const LayerDone& on_layer) {
  if (copies.empty()) return Status::Ok();
  std::promise<Status> promise;
  std::future<Status> result = promise.get_future();
  auto done = [&promise](Status st) { promise.set_value(std::move(st)); };
  if (gather) {
    engine_->Gather(copies, done);
  } else {
    engine_->Scatter(copies, on_layer, done);
  }
  return result.get();
}

void RuntimeImpl::RunSave(NamespaceId ns, std::optional<BlockKey> parent,
                          const std::vector<BlockKey>& keys, const std::vector<uint32_t>& blocks,
                          CompletionSource& done) {
  size_t missing = 0;
  {
    std::lock_guard lock(mu_);
    for (const BlockKey& k : keys) missing += index_.Find({ns, k}) == nullptr ? 1 : 0;
  }
  // A save has no deadline of its own; this bounds how long it waits for
  // slots that other threads are freeing.
  EnsureHubRoom(missing, std::chrono::steady_clock::now() + kSaveRoomWait);

  std::vector<IndexEntry*> fresh;
  std::vector<size_t> fresh_item;
  {
    std::lock_guard lock(mu_);
    stats_.save_blocks += keys.size();
    IndexEntry* prev = nullptr;
    Status broken;
    if (parent) {
      prev = index_.Find({ns, *parent});
      if (prev == nullptr) {
        broken = Status::InvalidArgument("save: parent block " + ToHex(*parent) +
                                         " is not stored; save the prefix first");
      }
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!broken.ok()) {
        done.Set(i, broken);
        ++stats_.save_failures;
        continue;
      }
      if (IndexEntry* e = index_.Find({ns, keys[i]})) {
        ++stats_.save_duplicates;  // stored already, or being stored by another call
        done.Set(i, Status::Ok());
        prev = e;
        continue;
      }
      std::optional<uint32_t> slot = arena_->Allocate();
      if (!slot) {
        // The rest of the chain would hang off a missing block: fail it too.
        broken = Status::ResourceExhausted("save: tier '" + options_.tiers[0].name +
                                           "' is full and nothing can be evicted");
        done.Set(i, broken);
        ++stats_.save_failures;
        continue;
      }
      IndexEntry* e = index_.Insert({ns, keys[i]}, prev, options_.block_bytes);
      e->host_slot = *slot;
      e->pins = 1;
      fresh.push_back(e);
      fresh_item.push_back(i);
      prev = e;
    }
  }

  std::vector<BlockCopy> copies;
  copies.reserve(fresh.size());
  for (size_t j = 0; j < fresh.size(); ++j) {
    copies.push_back({blocks[fresh_item[j]], arena_->Slot(fresh[j]->host_slot)});
  }
  Status copied = RunCopy(/*gather=*/true, copies, {});

  {
    std::lock_guard lock(mu_);
    const uint64_t now = NowNs();
    // Deepest first, so that parents end up more recent than their children
    // and the least recent end of the list holds leaves.
    for (size_t j = fresh.size(); j-- > 0;) {
      IndexEntry* e = fresh[j];
      --e->pins;
      if (copied.ok()) {
        e->state = EntryState::kReady;
        index_.AddLocation(e, 0, now);
        done.Set(fresh_item[j], Status::Ok(), e->bytes);
        ++stats_.saved_blocks;
        ++tier_counts_[0].hub_blocks_in;
        tier_counts_[0].hub_bytes_in += e->bytes;
      } else {
        arena_->Free(e->host_slot);
        e->state = EntryState::kReady;  // lets Erase clean up emptied ancestors
        index_.Erase(e);
        done.Set(fresh_item[j], copied.WithContext("save: copy from the engine"));
        ++stats_.save_failures;
      }
    }
  }
  if (HubAboveHigh()) WakeMover();
}

}  // namespace kvtier::internal
