// The mover: keeps every tier under its high watermark by demoting the least
// recently used leaves to the next tier, or dropping them from the last one.
#include <cmath>
#include <map>

#include "core/runtime_impl.h"
#include "kvtier/block_header.h"

namespace kvtier::internal {

void RuntimeImpl::WakeMover() {
  {
    std::lock_guard lock(mover_mu_);
    mover_kick_ = true;
  }
  mover_cv_.notify_one();
}

void RuntimeImpl::MoverLoop() {
  std::unique_lock lock(mover_mu_);
  const auto interval = std::chrono::milliseconds(options_.mover.interval_ms);
  while (!mover_stop_) {
    mover_cv_.wait_for(lock, interval, [&] { return mover_stop_ || mover_kick_; });
    if (mover_stop_) break;
    mover_kick_ = false;
    lock.unlock();
    MoverPass();
    lock.lock();
  }
}

Result<size_t> RuntimeImpl::TEST_RunMoverOnce() { return MoverPass(); }

bool RuntimeImpl::HubAboveHigh() const {
  return arena_->used_slots() >
         options_.tiers[0].watermarks.high * static_cast<double>(arena_->slot_count());
}

size_t RuntimeImpl::MoverPass() {
  size_t moved = 0;
  for (size_t t = 0; t < tier_count(); ++t) {
    const WatermarkOptions& wm = options_.tiers[t].watermarks;
    double used, capacity;
    if (t == 0) {
      used = arena_->used_slots();
      capacity = arena_->slot_count();
    } else {
      TierUsage u = lower_[t - 1]->Usage();
      used = static_cast<double>(u.used_bytes) / static_cast<double>(options_.block_bytes);
      capacity = static_cast<double>(u.capacity_bytes) / static_cast<double>(options_.block_bytes);
    }
    if (used <= wm.high * capacity) continue;
    auto excess = static_cast<size_t>(std::ceil(used - wm.low * capacity));
    moved += EvictFromTier(t, excess);
  }
  return moved;
}

void RuntimeImpl::EnsureHubRoom(size_t slots, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const size_t free = HubFreeSlots();
    if (free >= slots || std::chrono::steady_clock::now() >= deadline) break;
    if (EvictFromTier(0, slots - free) > 0) continue;
    // Nothing this thread may take: blocks that another pass (the mover, or
    // another request) is moving out will free their slots shortly.
    std::unique_lock lock(mu_);
    if (moving_blocks_ == 0) break;
    if (moves_done_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  }
  if (HubAboveHigh()) WakeMover();
}

size_t RuntimeImpl::EvictFromTier(size_t tier, size_t blocks) {
  size_t total = 0;
  const bool has_next = tier + 1 < tier_count();
  while (total < blocks) {
    size_t batch = std::min<size_t>(blocks - total, options_.mover.batch_blocks);
    std::vector<IndexEntry*> victims;
    {
      std::lock_guard lock(mu_);
      // Without a next tier a block can leave only if another tier still
      // holds it or nothing hangs below it.
      victims = index_.Victims(tier, batch, 4 * batch + 256,
                               [&](const IndexEntry& e, uint32_t children_chosen) {
                                 return has_next || (e.locations & ~(1U << tier)) != 0 ||
                                        e.children == children_chosen;
                               });
      for (IndexEntry* v : victims) {
        v->moving = true;
        ++v->pins;
      }
      moving_blocks_ += victims.size();
    }
    if (victims.empty()) break;
    size_t dropped = WritebackAndDrop(tier, victims);
    total += dropped;
    if (dropped == 0) break;
  }
  return total;
}

size_t RuntimeImpl::WritebackAndDrop(size_t tier, std::vector<IndexEntry*>& victims) {
  const size_t next = tier + 1;
  std::vector<bool> written(victims.size(), false);
  if (next < tier_count()) {
    // Group by namespace: a tier batch belongs to one namespace. Blocks that a
    // deeper tier already holds need no write.
    std::map<uint64_t, std::vector<size_t>> by_ns;
    for (size_t i = 0; i < victims.size(); ++i) {
      if ((victims[i]->locations >> next) == 0) by_ns[victims[i]->id.ns.value].push_back(i);
    }
    size_t to_write = 0;
    for (auto& [ns, items] : by_ns) to_write += items.size();
    // `always` is the only admission policy the runtime runs today: every
    // block offered to the next tier is admitted.
    if (to_write > 0) metrics_.AddAdmission(next, /*admitted=*/true, to_write);
    MakeRoomBelow(next, to_write);
    std::vector<std::vector<std::byte>> staging;  // below the hub: read first
    for (auto& [ns, items] : by_ns) {
      std::vector<WriteOp> ops;
      for (size_t i : items) {
        IndexEntry* v = victims[i];
        if (tier == 0) {
          auto payload = arena_->Slot(v->host_slot).first(v->bytes);
          // Pinned and moving: nobody else touches the checksum now.
          if (!v->checksum) v->checksum = PayloadChecksum(ChecksumKind::kXxh3_64, payload);
          ops.push_back({v->id.key, payload});
          continue;
        }
        staging.emplace_back(v->bytes);
        ReadOp rd{v->id.key, staging.back()};
        Completion r = lower_[tier - 1]->Read(v->id.ns, std::span(&rd, 1));
        if (r.Wait().ok()) ops.push_back({v->id.key, staging.back()});
      }
      Completion w = lower_[next - 1]->Write(NamespaceId{ns}, ops);
      (void)w.Wait();
      for (size_t j = 0, k = 0; j < items.size() && k < ops.size(); ++j) {
        if (ops[k].key != victims[items[j]]->id.key) continue;
        written[items[j]] = w.result(k).ok();
        ++k;
      }
    }
  }

  size_t dropped = 0;
  std::vector<NsKey> removals;
  {
    std::lock_guard lock(mu_);
    const uint64_t now = NowNs();
    for (size_t i = 0; i < victims.size(); ++i) {
      IndexEntry* v = victims[i];
      --v->pins;
      v->moving = false;
      --moving_blocks_;
      if (written[i]) {
        index_.AddLocation(v, next, now);
        ++tier_counts_[tier].demoted;
        metrics_.AddMove(tier, next, 1, v->bytes);
      }
      const bool other_copy = (v->locations & ~(1U << tier)) != 0;
      if (v->pins != 0 || (!other_copy && v->children != 0)) {
        ++tier_counts_[tier].rejected;  // in use, or it would strand its children
        continue;
      }
      ++tier_counts_[tier].evicted;
      ++dropped;
      DropCopyLocked(v, tier, &removals);
    }
    // Under the lock, so a waiter cannot miss it between its check and wait.
    moves_done_.notify_all();
  }
  if (!removals.empty()) {
    std::map<uint64_t, std::vector<BlockKey>> by_ns;
    for (const NsKey& k : removals) by_ns[k.ns.value].push_back(k.key);
    for (auto& [ns, keys] : by_ns) (void)lower_[tier - 1]->Remove(NamespaceId{ns}, keys).Wait();
  }
  return dropped;
}

void RuntimeImpl::MakeRoomBelow(size_t tier, size_t blocks) {
  if (blocks == 0) return;
  TierUsage u = lower_[tier - 1]->Usage();
  uint64_t free = (u.capacity_bytes - std::min(u.used_bytes, u.capacity_bytes)) / options_.block_bytes;
  // Cascades: demoting out of `tier` makes room in the tier below it first.
  if (free < blocks) EvictFromTier(tier, blocks - free);
}

void RuntimeImpl::DropCopyLocked(IndexEntry* e, size_t tier, std::vector<NsKey>* lower_removals) {
  if (tier == 0) {
    arena_->Free(e->host_slot);
    e->host_slot = kNoSlot;
  } else {
    lower_removals->push_back(e->id);
  }
  index_.DropLocation(e, tier);
  if (e->locations == 0) index_.Erase(e);
}

}  // namespace kvtier::internal
