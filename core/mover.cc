// The mover: keeps every tier under its high watermark by demoting leaves,
// in the order of the tier's eviction policy, to the next tier when its
// admission accepts them, or dropping them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

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
    // A throw here (a lower tier's Usage() or a policy with a bug, or memory
    // running out) would end the process; the pass has settled its victims
    // (WritebackAndDrop), so the next one starts clean.
    Result<size_t> pass = TryMoverPass();
    try {
      if (!pass.ok() && log_) log_->Log(LogLevel::kError, pass.status().ToString());
    } catch (...) {  // out of memory for the log line: the next pass goes on
    }
    lock.lock();
  }
}

Result<size_t> RuntimeImpl::TEST_RunMoverOnce() { return TryMoverPass(); }

Result<size_t> RuntimeImpl::TryMoverPass() {
  try {
    return MoverPass();
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("mover pass ran out of memory");
  } catch (const std::exception& e) {
    // Built where memory may be short: without it, the status alone.
    return Status::Internal(e.what()).WithContext("mover pass failed with an exception");
  } catch (...) {
    return Status::Internal("mover pass failed with an exception");
  }
}

bool RuntimeImpl::HubAboveHigh() const {
  return arena_->used_slots() >
         options_.tiers[0].watermarks.high * static_cast<double>(arena_->slot_count());
}

uint64_t RuntimeImpl::CapacityBlocks(size_t tier) const {
  if (tier == 0) return arena_->slot_count();
  return lower_[tier - 1]->Usage().capacity_bytes / options_.block_bytes;
}

void RuntimeImpl::TuneAlphas() {
  std::vector<AlphaTuning> due;
  {
    std::lock_guard lock(mu_);
    due = policies_->TakeDueTunings();  // copies shared pointers only
  }
  for (const AlphaTuning& tuning : due) {
    // The replay (a few grid points over the window) runs without mu_:
    // lookups, saves and loads go on meanwhile.
    // It copies the window: out of memory keeps the current α rather than
    // ending the mover thread (and the process) with the exception.
    double alpha = tuning.current;
    try {
      alpha = RunAlphaTuning(tuning, CapacityBlocks(tuning.tier));
    } catch (const std::bad_alloc&) {
    }
    std::lock_guard lock(mu_);
    policies_->SetAlpha(tuning.tier, alpha);
  }
}

size_t RuntimeImpl::MoverPass() {
  RetryPendingRemoves();
  TuneAlphas();
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

void RuntimeImpl::EnsureHubRoom(size_t slots, SteadyTime deadline,
                                const std::vector<IndexEntry*>* own) {
  // Pins end within milliseconds in a working engine, so a load waits for
  // room that blocks pinned by others hold, or that saves are filling; but
  // not past kHubRoomWait, as the pins of an engine that holds them while it
  // waits would never end.
  const SteadyTime held_until = std::min(deadline, std::chrono::steady_clock::now() + kHubRoomWait);
  // One load at a time waits for pins: two that each need room could
  // otherwise each wait out the other's, and both lose their second.
  bool pin_waiter = false;
  // Given up however the wait ends: one that threw (memory running out in
  // OthersPinHubLocked) would otherwise keep every later load from waiting.
  struct GiveUpWaiter {
    RuntimeImpl& rt;
    const bool& waiter;
    ~GiveUpWaiter() {
      if (!waiter) return;
      std::lock_guard lock(rt.mu_);
      rt.pin_waiter_taken_ = false;
    }
  } give_up{*this, pin_waiter};
  // A pin that ends after the eviction below chose its victims, before the
  // wait, makes a block it may take: tried again, not given up on.
  uint64_t pins_ended = 0;
  if (own != nullptr) {
    std::lock_guard lock(mu_);
    pins_ended = hub_pins_ended_;
  }
  for (;;) {
    const size_t free = HubFreeSlots();
    const SteadyTime now = std::chrono::steady_clock::now();
    if (free >= slots || now >= deadline) break;
    if (EvictFromTier(0, slots - free, deadline) > 0) continue;
    if (after_hub_room_try_) after_hub_room_try_();
    // Nothing this thread may take: blocks that another pass (the mover, or
    // another request) is moving out will free their slots shortly, and so
    // may a pin that ends (DropPinLocked wakes the wait; other frees are
    // seen at the next look).
    std::unique_lock lock(mu_);
    if (own != nullptr && hub_pins_ended_ != pins_ended) {
      pins_ended = hub_pins_ended_;
      continue;
    }
    const bool held = own != nullptr && now < held_until && slots <= arena_->slot_count() &&
                      (pin_waiter || !pin_waiter_taken_) &&
                      (filling_slots_ != 0 || OthersPinHubLocked(*own));
    if (held && !pin_waiter) pin_waiter = pin_waiter_taken_ = true;
    if (moving_blocks_ == 0 && !held) break;
    const SteadyTime until =
        moving_blocks_ != 0 ? deadline : std::min(held_until, now + kHubRoomRecheck);
    ++hub_room_waiters_;
    moves_done_.wait_until(lock, until);
    --hub_room_waiters_;
    pins_ended = hub_pins_ended_;  // the next try sees those
  }
  if (HubAboveHigh()) WakeMover();
}

bool RuntimeImpl::OthersPinHubLocked(const std::vector<IndexEntry*>& entries) const {
  const std::unordered_set<const IndexEntry*> own(entries.begin(), entries.end());
  // The load's own request pins more than its keys: the chain above them
  // (a load of a suffix) and what hangs below them (a hybrid model's state
  // parts, whose own load names only the parts). Those are its family, not
  // another request's. A block under an ancestor only (a sibling request
  // sharing a prefix) is another's.
  std::unordered_set<const IndexEntry*> above;
  for (const IndexEntry* e : own) {
    for (const IndexEntry* p = e != nullptr ? e->parent : nullptr; p != nullptr; p = p->parent) {
      if (!above.insert(p).second) break;
    }
  }
  std::unordered_map<const IndexEntry*, bool> under_own;  // memo of the walks up
  auto family = [&](const IndexEntry* leaf) {
    std::vector<const IndexEntry*> path;
    bool found = false;
    for (const IndexEntry* p = leaf; p != nullptr; p = p->parent) {
      if (own.count(p) != 0) {
        found = true;
        break;
      }
      if (auto it = under_own.find(p); it != under_own.end()) {
        found = it->second;
        break;
      }
      path.push_back(p);
    }
    for (const IndexEntry* p : path) under_own.emplace(p, found);
    return found;
  };
  // A hub block is held by a pin when it has children (then a leaf below
  // it is held too) or is a leaf with a pin that is not a save's hold.
  return index_.AnyLeaf(0, [&](const IndexEntry& e) {
    return e.pins > e.save_holds && !e.moving && above.count(&e) == 0 && !family(&e);
  });
}

bool RuntimeImpl::ExpiringCopiesLocked(const IndexEntry& v, size_t from, uint64_t now_ns) const {
  const uint32_t below = v.locations & ~((1U << from) - 1);
  if (below == 0 || (below & ~expiring_tiers_) != 0) return false;  // none, or one that lasts
  return v.expiring_touch_ns + refresh_after_ns_ <= now_ns;
}

std::vector<IndexEntry*> RuntimeImpl::SelectVictimsLocked(size_t tier, size_t batch) {
  const bool has_next = tier + 1 < tier_count();
  // A block only this tier holds whose key a Remove is still deleting in the
  // next one waits here for it (DecideAdmission keeps it): not a victim, or
  // a caller short of one slot would get nothing from its pass.
  const auto* removing = has_next ? &pending_removes_[tier + 1] : nullptr;
  auto waits_for_remove = [&](const IndexEntry& e) {
    if (removing == nullptr || OtherCopiesLocked(e, tier) != 0) return false;
    const auto it = removing->find(e.id);
    return it != removing->end() && it->second.running != 0;
  };
  // Without a next tier a block can leave only if another tier still holds
  // it or nothing hangs below it, nor will (a save holding it).
  auto may_drop = [&](const IndexEntry& e, uint32_t children_chosen) {
    if (waits_for_remove(e)) return false;
    return has_next || OtherCopiesLocked(e, tier) != 0 ||
           (e.children == children_chosen && e.save_holds == 0);
  };
  std::vector<IndexEntry*> victims;
  if (policies_->lru(tier)) {
    victims = index_.Victims(tier, batch, 4 * batch + 256, may_drop);
  } else {
    // The policy chooses among the least recently used few batches of
    // candidates; Choose keeps children ahead of their parents.
    std::vector<IndexEntry*> candidates =
        index_.Victims(tier, 4 * batch, 8 * batch + 256, may_drop);
    victims = policies_->Choose(tier, candidates, batch, may_drop, NowNs());
  }
  for (IndexEntry* v : victims) {
    v->moving = true;
    ++v->pins;
  }
  moving_blocks_ += victims.size();
  return victims;
}

size_t RuntimeImpl::EvictFromTier(size_t tier, size_t blocks, SteadyTime deadline) {
  size_t total = 0;
  while (total < blocks) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    // A batch both tiers accept in one call (each may refuse larger ones).
    size_t batch = std::min<size_t>(blocks - total, options_.mover.batch_blocks);
    for (size_t t : {tier, tier + 1}) {
      if (t != 0 && t < tier_count()) batch = std::min(batch, BatchLimit(*lower_[t - 1]));
    }
    std::vector<IndexEntry*> victims;
    {
      std::lock_guard lock(mu_);
      victims = SelectVictimsLocked(tier, batch);
    }
    if (victims.empty()) break;
    size_t dropped = WritebackAndDrop(tier, victims, deadline);
    total += dropped;
    if (dropped == 0) break;
  }
  return total;
}

std::vector<bool> RuntimeImpl::DecideAdmission(size_t tier, const std::vector<IndexEntry*>& victims,
                                               std::vector<bool>& reclaimed,
                                               std::vector<bool>& keep) {
  const size_t next = tier + 1;
  std::vector<bool> write(victims.size(), false);
  // An `always` tier needs no per-block question (nor its tier state).
  const bool admits_all = policies_->admits_all(next);
  TierUsage usage;
  if (!admits_all) usage = lower_[next - 1]->Usage();
  std::lock_guard lock(mu_);
  TierState state;
  if (!admits_all)
    state = policies_->StateOf(next, usage.capacity_bytes, usage.used_bytes, NowNs());
  uint64_t admitted = 0, refused = 0;
  // Victims come children first (BlockIndex::Victims, TierPolicies::Choose),
  // so when a parent is decided, `vanishing` counts its children of this
  // batch that leave every tier.
  std::unordered_map<const IndexEntry*, uint32_t> vanishing;
  auto& removing = pending_removes_[next];
  const uint64_t now = NowNs();
  // A tier that stopped answering takes nothing for a while: victims that
  // need no copy there leave, as if refused, instead of waiting on it.
  if (WritesStalledLocked(next)) return write;
  for (size_t i = 0; i < victims.size(); ++i) {
    IndexEntry* v = victims[i];
    const bool stale_below = expiring_tiers_ != 0 && ExpiringCopiesLocked(*v, next, now);
    if (stale_below && v->In(next)) {
      // Written again whatever the admission says: the tier holds it already.
      // Kept above until that write ends (WritebackAndDrop); not while a
      // Remove of it there is listed.
      if (removing.count(v->id) == 0) write[i] = keep[i] = true;
      continue;
    }
    // A deeper tier holds it: no write (unless that copy may have expired).
    if ((v->locations >> next) != 0 && !stale_below) continue;
    const auto listed = removing.find(v->id);
    if (listed != removing.end() && listed->second.running != 0) {
      // A Remove of an older copy runs there: this one waits above for it
      // to land, as no write of it may slip in before.
      if (OtherCopiesLocked(*v, tier) == 0) keep[i] = true;
      continue;
    }
    const bool other_copy = OtherCopiesLocked(*v, tier) != 0;
    const auto gone = vanishing.find(v);
    const uint32_t staying = v->children - (gone == vanishing.end() ? 0 : gone->second);
    // A part of a state checkpoint whose later parts are gone (refused
    // here, or lost) is of no use, as a lookup needs every part: dropped.
    if (v->is_checkpoint && staying == 0 && v->save_holds == 0 && !LastPart(*v)) {
      if (!other_copy && v->parent != nullptr) ++vanishing[v->parent];
      continue;
    }
    const bool admit =
        admits_all || policies_->Admit(next, policies_->AdmissionMetaOf(*v, next), state);
    ++(admit ? admitted : refused);
    // A save holding it is about to chain a child under it.
    write[i] = admit || (!other_copy && (staying > 0 || v->save_holds != 0));
    if (!admit && write[i]) ++tier_counts_[next].forced;
    if (!write[i] && !other_copy && v->parent != nullptr) ++vanishing[v->parent];
    if (write[i] && listed != removing.end()) {
      removing.erase(listed);  // the write replaces the copy that failed to go
      reclaimed[i] = true;
    }
  }
  if (admitted != 0) metrics_.AddAdmission(next, true, admitted);
  if (refused != 0) metrics_.AddAdmission(next, false, refused);
  return write;
}

size_t RuntimeImpl::WritebackAndDrop(size_t tier, std::vector<IndexEntry*>& victims,
                                     SteadyTime deadline) {
  const size_t next = tier + 1;
  const size_t n = victims.size();
  std::vector<bool> written, reclaimed;
  std::vector<bool> keep;  // stays above unless written
  std::vector<bool> late;  // settled by SettleLateWriteLocked
  std::vector<Status> read_status;
  std::vector<bool> tried;  // written below, or its write failed
  std::vector<NsKey> removals;
  try {
    removals.reserve(n);  // at most one per victim
    written.assign(n, false);
    reclaimed.assign(n, false);
    keep.assign(n, false);
    late.assign(n, false);
    read_status.resize(n);
    tried.assign(n, false);
  } catch (...) {
    // Out of memory before anything moved: the victims stay, not moving.
    std::lock_guard lock(mu_);
    for (IndexEntry* v : victims) EndMoveLocked(v);
    NotifyMovesSettledLocked();
    throw;
  }
  if (next < tier_count()) {
    try {
      tried = DecideAdmission(tier, victims, reclaimed, keep);
      WriteToNext(tier, victims, tried, written, read_status, deadline, &late, &reclaimed);
    } catch (...) {
      // A lower tier's Usage() or a policy threw, or memory ran out: the
      // victims stay where they are, their copies below indexed as far as
      // written, or they would stay pinned and moving for good.
      std::lock_guard lock(mu_);
      const uint64_t now = NowNs();
      for (size_t i = 0; i < victims.size(); ++i) {
        if (late[i]) continue;
        EndMoveLocked(victims[i]);
        try {
          if (written[i]) {
            index_.AddLocation(victims[i], next, now);
          } else if (reclaimed[i]) {
            // Its failed Remove's listing, taken over for the write, comes
            // back: the old copy may still be there.
            (void)QueueRemoveLocked(next, victims[i]->id, /*running=*/false);
          }
        } catch (...) {  // out of memory: that copy below is not indexed (or listed)
        }
      }
      NotifyMovesSettledLocked();
      throw;
    }
  }

  size_t dropped = 0;
  size_t listed = 0;  // removals[0, listed) are listed as running removes
  {
    std::lock_guard lock(mu_);
    const uint64_t now = NowNs();
    uint64_t written_bytes = 0;
    for (size_t i = 0; i < victims.size(); ++i) {
      IndexEntry* v = victims[i];
      if (late[i]) continue;  // still being written
      EndMoveLocked(v);
      // Memory running out while one victim is settled leaves it where it
      // is; the others are settled all the same.
      try {
        if (written[i]) {
          written_bytes += IndexDemotedLocked(v, tier, now);
        } else if (reclaimed[i]) {
          (void)QueueRemoveLocked(next, v->id, /*running=*/false);  // the old copy may be there
        }
        const StatusCode read = read_status[i].code();
        // A copy that fails to read with an I/O error again and again (a bad
        // sector) would be every pass's first victim and keep the tier above
        // its watermark: after kMoveFailuresToGiveUp failed moves in a row
        // it is given up as a corrupt one is.
        const bool unreadable = read == StatusCode::kIOError && MoveFailedTooOften(v);
        if (read == StatusCode::kNotFound || read == StatusCode::kCorruption || unreadable) {
          // The tier lost this copy (expired, evicted, corrupt): forget it, as
          // a failed load does; a corrupt or unreadable one still takes room
          // there.
          index_.DropLocation(v, tier);
          if (read != StatusCode::kNotFound) removals.push_back(v->id);
          v->failed_moves = 0;
          ++dropped;
          EraseIfUnheldLocked(v);
          continue;
        }
        if (!read_status[i].ok()) continue;  // unreadable now (unreachable, a timeout): kept
        // A write below that fails again and again (that tier down, or full of
        // what it cannot evict) would keep a block here for as long as that
        // lasts, and such blocks would fill this tier. After
        // kMoveFailuresToGiveUp failures in a row it goes, as a leaf whose
        // write failed does at once: a parent becomes a link with no copy (its
        // children below are unreachable until the engine's next save of it
        // gives it a copy again), a copy below that may have expired is left
        // for a load to find or miss.
        const bool give_up = tried[i] && !written[i] && MoveFailedTooOften(v);
        if (keep[i] && !written[i] && !give_up) {
          // Its copies below may be gone, or a Remove of it runs there:
          // kept until written.
          ++tier_counts_[tier].rejected;
          continue;
        }
        const bool other_copy = OtherCopiesLocked(*v, tier) != 0;
        if (v->pins != v->save_holds ||
            (!other_copy && (v->save_holds != 0 || (v->children != 0 && !give_up)))) {
          ++tier_counts_[tier].rejected;  // in use, or it would strand (future) children
          continue;
        }
        v->failed_moves = 0;                 // a copy it gets again starts afresh
        DropCopyLocked(v, tier, &removals);  // may erase v
        ++tier_counts_[tier].evicted;
        ++dropped;
      } catch (...) {
      }
    }
    try {
      if (next < tier_count()) policies_->OnWritten(next, written_bytes, now);
    } catch (...) {
    }
    // Out of memory listing one: it and the rest are removed unlisted (a
    // failure of theirs is not retried, and their Remove leaves the list
    // alone), and no key is left marked running without its Remove.
    try {
      for (; listed < removals.size(); ++listed) {
        (void)QueueRemoveLocked(tier, removals[listed], /*running=*/true);
      }
    } catch (...) {
    }
    NotifyMovesSettledLocked();
  }
  std::vector<NsKey> unlisted;
  if (listed < removals.size()) {
    try {
      unlisted.assign(removals.begin() + static_cast<std::ptrdiff_t>(listed), removals.end());
    } catch (...) {  // out of memory: their copies stay taking room there
    }
    removals.resize(listed);
  }
  // Failures are retried by the mover; a caller with a deadline does not wait.
  SendRemoves(tier, removals, unlisted, /*wait=*/deadline == SteadyTime::max());
  return dropped;
}

void RuntimeImpl::WriteToNext(size_t tier, const std::vector<IndexEntry*>& victims,
                              const std::vector<bool>& write, std::vector<bool>& written,
                              std::vector<Status>& read_status, SteadyTime deadline,
                              std::vector<bool>* late, const std::vector<bool>* reclaimed) {
  const size_t next = tier + 1;
  // Group by namespace: a tier batch belongs to one namespace.
  std::map<uint64_t, std::vector<size_t>> by_ns;
  size_t to_write = 0;
  for (size_t i = 0; i < victims.size(); ++i) {
    if (!write[i]) continue;
    by_ns[victims[i]->id.ns.value].push_back(i);
    ++to_write;
  }
  MakeRoomBelow(next, to_write, deadline);
  for (auto& [ns, items] : by_ns) {
    if (deadline != SteadyTime::max() && std::chrono::steady_clock::now() >= deadline) {
      // No room below was made in time, or an earlier write took it all:
      // these copies stay where they are, for the mover to move.
      for (size_t i : items) {
        read_status[i] = Status::DeadlineExceeded("demote: not written to tier '" +
                                                  lower_[next - 1]->name() + "' by the deadline");
      }
      continue;
    }
    auto staging = std::make_shared<std::vector<std::vector<std::byte>>>();
    std::vector<size_t> op_item;
    const std::vector<WriteOp> ops =
        StageWrites(tier, victims, items, staging, op_item, read_status, deadline);
    if (ops.empty()) continue;
    const uint64_t sent_ns = NowNs();
    Completion w = lower_[next - 1]->Write(NamespaceId{ns}, ops);
    if (!FinishedBy(w, deadline)) {
      if (HandOverLateWrite(tier, w, ops, victims, op_item, *reclaimed, staging, sent_ns, *late)) {
        continue;
      }
      // Out of memory to hand the write over: waited for instead, so that
      // its victims do not settle while it may still read them.
      (void)w.Wait();
    }
    for (size_t k = 0; k < ops.size(); ++k) written[op_item[k]] = w.result(k).ok();
    std::optional<std::string> report;
    {
      std::lock_guard lock(mu_);
      report = NoteWriteEndedLocked(next, w, sent_ns);
      for (size_t k = 0; k < ops.size(); ++k) {
        const size_t i = op_item[k];
        if (written[i]) written[i] = WrittenCopyIsCurrentLocked(*victims[i], next, ops[k].checksum);
      }
    }
    LogWarning(report);
  }
}

std::optional<std::string> RuntimeImpl::NoteWriteEndedLocked(size_t tier, const Completion& c,
                                                             uint64_t sent_ns) {
  constexpr uint64_t kReportIntervalNs = 60'000'000'000;
  const uint64_t now = NowNs();
  // A tier that refuses at once (a server down: Unavailable) costs nothing
  // to try; one that times out holds its victims for the whole time out.
  // Tiers say "timed out" in their own words (Redis: Unavailable), so a
  // failure that took as long as the stall lasts is one too.
  const bool slow = now - sent_ns >= kWriteStallNs;
  bool timed_out = false;
  const Status* first = nullptr;
  for (size_t i = 0; i < c.size(); ++i) {
    const Status& st = c.result(i);
    if (st.ok()) continue;
    if (first == nullptr) first = &st;
    ++write_failures_unlogged_[tier];
    timed_out = timed_out || slow || st.code() == StatusCode::kDeadlineExceeded;
  }
  writes_stalled_until_ns_[tier] = timed_out ? now + kWriteStallNs : 0;
  const uint64_t last = write_failure_logged_ns_[tier];
  if (first == nullptr || (last != 0 && now - last < kReportIntervalNs)) return std::nullopt;
  const uint64_t failed = std::exchange(write_failures_unlogged_[tier], 0);
  write_failure_logged_ns_[tier] = now;
  return "tier '" + lower_[tier - 1]->name() + "': " + std::to_string(failed) +
         " blocks could not be written to it" + (last == 0 ? "" : " since the last report") +
         " (each stays in the tier above, or is lost): " + first->ToString();
}

bool RuntimeImpl::FinishedBy(const Completion& c, SteadyTime deadline) {
  if (deadline == SteadyTime::max()) {
    (void)c.Wait();
    return true;
  }
  const auto left =
      std::max(std::chrono::nanoseconds(0), deadline - std::chrono::steady_clock::now());
  return c.WaitFor(left).ok() || c.Poll();
}

bool RuntimeImpl::HandOverLateWrite(size_t tier, const Completion& w,
                                    const std::vector<WriteOp>& ops,
                                    const std::vector<IndexEntry*>& victims,
                                    const std::vector<size_t>& op_item,
                                    const std::vector<bool>& reclaimed, const Staging& staging,
                                    uint64_t sent_ns, std::vector<bool>& late) noexcept {
  try {
    // The write goes on without this caller, reading the pinned hub slots
    // or `staging`, which it keeps; it settles its victims when it ends.
    std::vector<IndexEntry*> moved;
    std::vector<std::optional<uint64_t>> sent;
    std::vector<bool> moved_reclaimed;
    moved.reserve(op_item.size());
    sent.reserve(op_item.size());
    moved_reclaimed.reserve(op_item.size());
    for (size_t k = 0; k < op_item.size(); ++k) {
      moved.push_back(victims[op_item[k]]);
      sent.push_back(ops[k].checksum);
      moved_reclaimed.push_back(reclaimed[op_item[k]]);
    }
    std::function<void()> settle = [this, tier, moved = std::move(moved), sent = std::move(sent),
                                    moved_reclaimed = std::move(moved_reclaimed), staging, w,
                                    sent_ns] {
      std::optional<std::string> report;
      {
        std::lock_guard lock(mu_);
        try {
          report = NoteWriteEndedLocked(tier + 1, w, sent_ns);
        } catch (...) {  // out of memory for the report: the write is settled all the same
        }
        SettleLateWriteLocked(tier, moved, sent, moved_reclaimed, w);
      }
      try {
        LogWarning(report);
      } catch (...) {
      }
      std::lock_guard lock(mu_);  // the callback's last use of this runtime
      EndLateCallLocked();
    };
    {
      std::lock_guard lock(mu_);
      writes_stalled_until_ns_[tier + 1] = UINT64_MAX;  // until it ends (NoteWriteEndedLocked)
    }
    AddLateCallback(w, std::move(settle));
  } catch (...) {
    return false;
  }
  for (size_t i : op_item) late[i] = true;
  return true;
}

void RuntimeImpl::SettleLateWriteLocked(size_t tier, const std::vector<IndexEntry*>& moved,
                                        const std::vector<std::optional<uint64_t>>& sent,
                                        const std::vector<bool>& reclaimed, const Completion& w) {
  const uint64_t now = NowNs();
  uint64_t bytes = 0;
  for (size_t k = 0; k < moved.size(); ++k) {
    IndexEntry* v = moved[k];
    EndMoveLocked(v);
    // Memory running out for one leaves its copy below unindexed (or its
    // old copy's Remove unlisted); the others are settled all the same.
    try {
      if (w.result(k).ok() && WrittenCopyIsCurrentLocked(*v, tier + 1, sent[k])) {
        bytes += IndexDemotedLocked(v, tier, now);
        continue;
      }
      if (reclaimed[k]) (void)QueueRemoveLocked(tier + 1, v->id, /*running=*/false);
    } catch (...) {
    }
    (void)MoveFailedTooOften(v);   // stays for now; a later pass lets it go
    EraseIfUnheldLocked(v);        // a load may have found its copy lost meanwhile
  }
  try {
    policies_->OnWritten(tier + 1, bytes, now);
  } catch (...) {  // a policy's write accounting misses these bytes
  }
  NotifyMovesSettledLocked();
}

bool RuntimeImpl::WrittenCopyIsCurrentLocked(const IndexEntry& v, size_t tier,
                                             const std::optional<uint64_t>& sent) {
  if (v.checksum == sent) return true;
  try {
    (void)QueueRemoveLocked(tier, v.id, /*running=*/false);
  } catch (...) {  // out of memory: the stale copy takes room there until evicted
  }
  return false;
}

std::vector<WriteOp> RuntimeImpl::StageWrites(size_t tier, const std::vector<IndexEntry*>& victims,
                                              const std::vector<size_t>& items,
                                              const Staging& staging_buffers,
                                              std::vector<size_t>& op_item,
                                              std::vector<Status>& read_status,
                                              SteadyTime deadline) {
  std::vector<std::vector<std::byte>>& staging = *staging_buffers;
  std::vector<WriteOp> ops;
  // Read under the lock: a load that takes another writer's bytes from a
  // shared tier sets a block's checksum while this reads the block.
  std::vector<std::optional<uint64_t>> sums;
  {
    std::lock_guard lock(mu_);
    for (size_t i : items) sums.push_back(victims[i]->checksum);
  }
  if (tier == 0) {
    for (size_t j = 0; j < items.size(); ++j) {
      IndexEntry* v = victims[items[j]];
      auto payload = arena_->Slot(v->host_slot).first(v->bytes);
      if (!sums[j]) sums[j] = PayloadChecksum(ChecksumKind::kXxh3_64, payload);  // first leaving
      ops.push_back({v->id.key, payload, sums[j]});
      op_item.push_back(items[j]);
    }
    std::lock_guard lock(mu_);
    for (size_t j = 0; j < items.size(); ++j) {
      if (!victims[items[j]]->checksum) victims[items[j]]->checksum = sums[j];
    }
    return ops;
  }
  // Below the hub the payloads are read first, in one batch.
  std::vector<ReadOp> reads;
  for (size_t i : items) {
    staging.emplace_back(victims[i]->bytes);
    reads.push_back({victims[i]->id.key, staging.back()});
  }
  Tier& t = *lower_[tier - 1];
  Completion r = t.Read(victims[items.front()]->id.ns, reads);
  if (!FinishedBy(r, deadline)) {
    // The read goes on into `staging`, which it keeps; the copies stay.
    // Without memory to hand the buffers over, this waits for the read
    // instead: freeing them under it would corrupt the heap.
    try {
      r.OnDone([staging_buffers] {});
    } catch (...) {
      (void)r.Wait();
    }
    for (size_t i : items) {
      read_status[i] =
          Status::DeadlineExceeded("demote: not read from tier '" + t.name() + "' by the deadline");
    }
    return {};
  }
  uint64_t corrupt = 0;  // found here; the tier counts the Corruption it reports
  for (size_t j = 0; j < items.size(); ++j) {
    const IndexEntry* v = victims[items[j]];
    Status st = r.result(j);
    // The checks a load makes (InstallStagedLocked): a short read leaves
    // zeroes the next tier would store, and hash, as the block.
    if (st.ok() && r.bytes(j) != v->bytes) {
      st = Status::Corruption("demote: tier '" + t.name() + "' returned " +
                              std::to_string(r.bytes(j)) + " bytes for a " +
                              std::to_string(v->bytes) + "-byte block");
      ++corrupt;
    } else if (st.ok() && sums[j] &&
               PayloadChecksum(ChecksumKind::kXxh3_64, staging[j]) != *sums[j]) {
      if (SharedTier(tier)) {
        // Another writer's bytes for the key (InstallStagedLocked): not this
        // block's, not corrupt either, and not to be removed from under it.
        st = Status::NotFound("demote: block " + ToHex(v->id.key) + " in tier '" + t.name() +
                              "' was saved again by another writer");
      } else {
        st = Status::Corruption("demote: block " + ToHex(v->id.key) + " read from tier '" +
                                t.name() + "' fails its checksum");
        ++corrupt;
      }
    }
    if (!st.ok()) {
      read_status[items[j]] = std::move(st);
      continue;
    }
    ops.push_back({v->id.key, staging[j], sums[j]});
    op_item.push_back(items[j]);
  }
  if (corrupt != 0) {
    std::lock_guard lock(mu_);
    tier_counts_[tier].corruptions += corrupt;
  }
  return ops;
}

void RuntimeImpl::MakeRoomBelow(size_t tier, size_t blocks, SteadyTime deadline) {
  if (blocks == 0) return;
  TierUsage u = lower_[tier - 1]->Usage();
  uint64_t free =
      (u.capacity_bytes - std::min(u.used_bytes, u.capacity_bytes)) / options_.block_bytes;
  // Cascades: demoting out of `tier` makes room in the tier below it first.
  if (free < blocks) EvictFromTier(tier, blocks - free, deadline);
}

void RuntimeImpl::DropCopyLocked(IndexEntry* e, size_t tier, std::vector<NsKey>* lower_removals) {
  // Forgotten before its room is given back: a slot freed while still
  // indexed could be filled with another block's bytes.
  index_.DropLocation(e, tier);
  if (tier == 0) {
    arena_->Free(e->host_slot);
    e->host_slot = kNoSlot;
  } else {
    lower_removals->push_back(e->id);  // reserved by the caller
  }
  EraseIfUnheldLocked(e);  // one with children stays, as a link
}

}  // namespace kvtier::internal
