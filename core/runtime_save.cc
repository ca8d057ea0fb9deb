// The save path: engine pages -> hub slots, on a worker thread.
#include <algorithm>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "core/runtime_impl.h"

namespace kvtier::internal {
namespace {

constexpr std::chrono::seconds kSaveRoomWait(1);

// Whether a save must copy the block: no entry, or one kept only so that its
// stored children stay chained or because something still holds it (a link:
// no copy in any tier, not being filled or moved), which the save gives a
// copy again. Its pins do not stop that: with no copy, a lookup's or a
// load's pin uses none (a load copies and installs only into kReady
// entries), and another save's hold (IndexEntry::save_holds) is only for
// the chain. A block whose copy was found lost under a PinnedPrefix gets it
// back from the engine's next save.
bool NeedsCopy(const IndexEntry* e) {
  return e == nullptr || (e->locations == 0 && e->state == EntryState::kReady && !e->moving);
}

// Whether another thread is settling whether the block has a copy: a save
// filling it (its copy may fail), or the mover moving it after its last
// copy was found lost (the mover then drops it, or keeps it as a link).
// Until then it is neither stored nor a link a save can give a copy to.
bool Unsettled(const IndexEntry* e) {
  return e != nullptr && (e->state == EntryState::kFilling || (e->moving && e->locations == 0));
}

// Whether `parent` or one of `keys` is unsettled now: a save waits for that
// to end rather than take the block for stored. A save fills nothing of its
// own while it asks. REQUIRES: the runtime's mu_ held.
bool AnyUnsettled(BlockIndex& index, NamespaceId ns, std::optional<BlockKey> parent,
                  const std::vector<BlockKey>& keys) {
  auto unsettled = [&](const BlockKey& key) { return Unsettled(index.Find({ns, key})); };
  if (parent && unsettled(*parent)) return true;
  return std::any_of(keys.begin(), keys.end(), unsettled);
}

// The error of a key (or parent) still unsettled after RunSave's wait.
Status StillUnsettled(const IndexEntry& e, const char* what) {
  const std::string why = e.state == EntryState::kFilling
                              ? " is still being copied by another save after "
                              : " lost its copy and is still being moved after ";
  return Status::DeadlineExceeded("save: " + std::string(what) + " " + ToHex(e.id.key) + why +
                                  std::to_string(kSaveRoomWait.count()) + " s");
}

}  // namespace

void RuntimeImpl::RunCopy(bool gather, std::span<const BlockCopy> copies, const LayerDone& on_layer,
                          std::span<Status> results) noexcept {
  auto fail_all = [&](const Status& st) { std::fill(results.begin(), results.end(), st); };
  auto internal = [](std::string_view why) { return Status(StatusCode::kInternal, why); };
  if (copies.empty()) return;
  // The engine is the caller's code. A throw must not skip the settling of
  // this call's entries (RunSave reserved them kFilling and pinned, RunLoad
  // pinned them): every copy fails as Internal and the caller settles them
  // as after any failed copy. An engine that throws is taken to have
  // issued nothing: both engines here catch what is thrown once a copy is
  // in flight. Memory running out before the copy is issued fails it too.
  std::vector<Status> got;
  try {
    // Shared with `done`: an engine that throws yet still runs `done` later
    // must find the promise alive.
    auto promise = std::make_shared<std::promise<std::vector<Status>>>();
    std::future<std::vector<Status>> result = promise->get_future();
    auto done = [promise](std::vector<Status> st) { promise->set_value(std::move(st)); };
    try {
      if (gather) {
        engine_->Gather(copies, done);
      } else {
        engine_->Scatter(copies, on_layer, done);
      }
    } catch (const std::bad_alloc&) {
      return fail_all(internal(gather ? "copy engine Gather ran out of memory"
                                      : "copy engine Scatter ran out of memory"));
    } catch (const std::exception& e) {
      return fail_all(Status::Internal(e.what()).WithContext(gather ? "copy engine Gather threw"
                                                                    : "copy engine Scatter threw"));
    } catch (...) {
      return fail_all(internal(gather ? "copy engine Gather threw" : "copy engine Scatter threw"));
    }
    got = result.get();
  } catch (...) {
    return fail_all(internal("out of memory issuing the copy"));
  }
  if (got.size() != copies.size()) {  // a broken engine must not index out of range
    return fail_all(internal("copy engine returned a result count other than its copies'"));
  }
  std::move(got.begin(), got.end(), results.begin());
}

void RuntimeImpl::RunSave(NamespaceId ns, std::optional<BlockKey> parent,
                          const std::vector<BlockKey>& keys, const std::vector<uint32_t>& blocks,
                          const SaveOptions& hints, bool checkpoint, CompletionSource& done) {
  {
    // Counted first: should the job throw before its reservation, the
    // failures it counts are of blocks counted as asked for.
    std::lock_guard lock(mu_);
    stats_.save_blocks += keys.size();
  }
  // Three phases hold mu_, with the lock dropped between them (EnsureHubRoom
  // may evict, the gather runs unlocked); within a phase each key is looked
  // up once. An entry found in one phase may be inserted, evicted or erased
  // by another thread before the next (the held ones below only moved to
  // another tier, or found lost), so the reservation looks every key up
  // again rather than trusting what admission saw. The publish phase looks
  // nothing up: the reserved entries are kFilling and pinned, so their
  // pointers carry through.
  size_t missing = 0;
  size_t admitted = 0;
  // The parent and the keys stored already, held from admission until the
  // reservation (IndexEntry::save_holds): the room made for this save may
  // move them to a lower tier, but must not drop the blocks it hangs off.
  std::vector<IndexEntry*> held;
  held.reserve(keys.size() + 1);  // taking a hold cannot throw
  // An entry is erased only once its last hold here is gone, and not
  // touched after. REQUIRES: mu_ held.
  auto release_held = [&] {
    for (IndexEntry* e : held) {
      --e->save_holds;
      --e->pins;
      EraseIfUnheldLocked(e);
    }
    held.clear();
  };
  // Sized up front, so that filling them once entries are reserved cannot
  // fail for memory and skip FinishSaveLocked (the entries would stay
  // kFilling, holding their slots).
  std::vector<IndexEntry*> fresh;
  std::vector<size_t> fresh_item;
  std::vector<std::pair<size_t, size_t>> repeats;  // (item, its key's index in fresh)
  std::vector<BlockCopy> copies;
  std::vector<Status> copied(keys.size());
  std::vector<Decision> decided(keys.size(), Decision::kUndecided);
  fresh.reserve(keys.size());
  fresh_item.reserve(keys.size());
  repeats.reserve(keys.size());
  copies.reserve(keys.size());
  // A key (or the parent) another save is filling is not stored yet: that
  // copy may still fail. Nor is one the mover is moving after its last copy
  // was found lost. This save waits for those to settle (Unsettled), then
  // copies what they did not store from its own engine blocks, which its
  // caller keeps until it completes. It waits only before reserving
  // anything, and a save that has reserved waits for nothing but its copy,
  // so two saves never wait on each other; the mover waits for no save.
  // Past the deadline the reservation fails the keys from one still
  // unsettled on (ReserveSaveLocked).
  const SteadyTime fill_deadline = std::chrono::steady_clock::now() + kSaveRoomWait;
  bool parent_blocked = false;
  for (;;) {
    try {
      {
        std::unique_lock lock(mu_);
        fills_done_.wait_until(lock, fill_deadline,
                               [&] { return !AnyUnsettled(index_, ns, parent, keys); });
        admitted = AdmittedPrefixLocked(ns, parent, keys, hints, checkpoint, &missing, &held,
                                        &decided, &parent_blocked);
      }
      if (after_save_admission_) after_save_admission_();
      // A save has no deadline of its own; this bounds how long it waits for
      // slots that other threads are freeing.
      EnsureHubRoom(missing, std::chrono::steady_clock::now() + kSaveRoomWait);
    } catch (...) {
      // A policy or an eviction threw (the job fails as Internal): the holds
      // must not outlive the save, or their blocks could never leave.
      std::lock_guard lock(mu_);
      release_held();
      throw;
    }
    std::lock_guard lock(mu_);
    // Released under the lock the reservation holds: nothing evicts in
    // between, and the reservation sees each entry as it is (one whose last
    // copy was found lost meanwhile needs its copy again).
    release_held();
    // Another save began filling one of the keys while the room was made (or
    // a copy was found lost under the mover): wait for it too (what was
    // admitted is looked at again).
    if ((AnyUnsettled(index_, ns, parent, keys) ||
         (parent_blocked && !NeedsCopy(index_.Find({ns, *parent})))) &&
        std::chrono::steady_clock::now() < fill_deadline) {
      continue;  // (or another save stored the parent meanwhile: admit again)
    }
    try {
      ReserveSaveLocked(ns, parent, parent_blocked, keys, admitted, hints, checkpoint, done, fresh,
                        fresh_item, repeats);
    } catch (...) {
      // Memory ran out part way: what was reserved is settled as a failed
      // copy (its slot freed, its entry dropped), and the job fails the rest.
      copied.resize(fresh.size());
      std::fill(copied.begin(), copied.end(),
                Status::ResourceExhausted("save: out of memory reserving the block"));
      FinishSaveLocked(fresh, fresh_item, repeats, copied, done);
      throw;
    }
    break;
  }
  for (size_t j = 0; j < fresh.size(); ++j) {
    copies.push_back({blocks[fresh_item[j]], arena_->Slot(fresh[j]->host_slot)});
  }
  copied.resize(copies.size());  // shrinks: allocates nothing
  RunCopy(/*gather=*/true, copies, {}, copied);
  {
    std::lock_guard lock(mu_);
    FinishSaveLocked(fresh, fresh_item, repeats, copied, done);
  }
  if (HubAboveHigh()) WakeMover();
}

size_t RuntimeImpl::AdmittedPrefixLocked(NamespaceId ns, std::optional<BlockKey> parent,
                                         const std::vector<BlockKey>& keys,
                                         const SaveOptions& hints, bool checkpoint, size_t* missing,
                                         std::vector<IndexEntry*>* held,
                                         std::vector<Decision>* decided, bool* parent_blocked) {
  *missing = 0;
  *parent_blocked = false;
  // Holds an entry with a copy in some tier: a link or an entry being filled
  // has none for eviction to take. Recorded first, so that a throw later
  // in admission leaves no hold unreleased.
  auto hold = [&](IndexEntry* e) {
    if (e->locations == 0) return;
    held->push_back(e);
    ++e->pins;
    ++e->save_holds;
  };
  // Counts a key the save must copy, or holds one it hangs off.
  auto found = [&](IndexEntry* e) {
    if (NeedsCopy(e)) {
      ++*missing;
    } else {
      hold(e);
    }
  };
  auto admit_all = [&] {
    for (const BlockKey& key : keys) found(index_.Find({ns, key}));
    return keys.size();
  };
  uint32_t depth = 0;
  IndexEntry* p = nullptr;
  if (parent) {
    p = index_.Find({ns, *parent});
    // The save fails as a whole (ReserveSaveLocked), absent or a link with
    // no copy (one unsettled past the wait fails too): no room to make, and
    // nothing admitted should the parent be stored by the reservation.
    *parent_blocked = NeedsCopy(p) || Unsettled(p);
    if (*parent_blocked) return 0;
    depth = p->depth + 1;
    hold(p);
  }
  // With `always` alone the hub's answer is known: saves skip the policies
  // (and the hub's admission counts) on their hot path.
  if (hints.bypass_admission || policies_->admits_all(0)) return admit_all();
  const uint64_t now = NowNs();
  const TierState hub =
      policies_->StateOf(0, uint64_t{arena_->slot_count()} * arena_->slot_bytes(),
                         uint64_t{arena_->used_slots()} * arena_->slot_bytes(), now);
  // A checkpoint is admitted whole or not at all: its parts take the answer
  // the first one asked about got (a policy that draws at random, such as
  // write_budget, would otherwise store part of it, which no lookup uses).
  std::optional<bool> checkpoint_answer;
  for (size_t i = 0; i < keys.size(); ++i, ++depth) {
    if (IndexEntry* e = index_.Find({ns, keys[i]})) {
      depth = e->depth;  // stored already, or a link admitted before: nothing to decide
      found(e);
      continue;
    }
    if ((*decided)[i] != Decision::kUndecided) {  // asked before this save's wait
      if ((*decided)[i] == Decision::kRefused) return i;
      ++*missing;
      continue;
    }
    // The block as it would be indexed (ReserveSaveLocked, FinishSaveLocked).
    IndexEntry would;
    would.id = {ns, keys[i]};
    would.bytes = options_.block_bytes;
    would.depth = depth;
    would.last_access_ns = would.deepest_use_ns = would.inserted_ns = now;
    would.session_id = hints.session_id;
    would.expected_reuse = hints.expected_reuse;
    would.is_tail = i + 1 == keys.size();
    would.is_checkpoint = checkpoint;
    if (checkpoint) {
      would.parent = p;  // asked about as the boundary's checkpoint,
      would.bytes = options_.block_bytes * keys.size();  // once for all its parts
    }
    const bool admit = checkpoint_answer.has_value()
                           ? *checkpoint_answer
                           : policies_->Admit(0, policies_->AdmissionMetaOf(would, 0), hub);
    metrics_.AddAdmission(0, admit);
    if (checkpoint) checkpoint_answer = admit;
    (*decided)[i] = admit ? Decision::kAdmitted : Decision::kRefused;
    if (!admit) return i;
    ++*missing;
  }
  return keys.size();
}

void RuntimeImpl::ReserveSaveLocked(NamespaceId ns, std::optional<BlockKey> parent,
                                    bool parent_blocked, const std::vector<BlockKey>& keys,
                                    size_t admitted, const SaveOptions& hints, bool checkpoint,
                                    CompletionSource& done, std::vector<IndexEntry*>& fresh,
                                    std::vector<size_t>& fresh_item,
                                    std::vector<std::pair<size_t, size_t>>& repeats) {
  IndexEntry* prev = nullptr;
  Status broken;
  if (parent) {
    prev = index_.Find({ns, *parent});
    if (Unsettled(prev)) {
      // Its copy may yet fail: nothing can be answered as stored under it.
      broken = StillUnsettled(*prev, "parent block");
    } else if (NeedsCopy(prev)) {
      // Absent, or a link whose copy was lost: keys chained under it would
      // be stored where no lookup reaches them.
      broken = Status::InvalidArgument(
          checkpoint ? "save state: boundary block " + ToHex(*parent) +
                           " is not stored (never saved, or evicted since); save its chain "
                           "first, then its state"
                     : "save: parent block " + ToHex(*parent) +
                           " is not stored (never saved, or evicted since); save the chain "
                           "from its first block, with no parent");
    } else if (parent_blocked) {
      // Stored since admission stopped at it (RunSave's wait had ended):
      // no key was asked about, so none is refused, and none may be stored
      // unasked. Failed as if the parent had stayed unsettled a moment longer.
      broken = Status::DeadlineExceeded(
          "save: parent block " + ToHex(*parent) +
          " was not stored yet when the save was admitted (another save was still copying it, "
          "or it had no copy); save the keys again");
    }
  }
  // The parent is looked up again too: RunSave dropped mu_ since admission.
  bool refused = false;  // the hub refused a key: the rest of the chain stays out
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!broken.ok()) {
      done.Set(i, broken);
      ++stats_.save_failures;
      continue;
    }
    IndexEntry* e = refused ? nullptr : index_.Find({ns, keys[i]});
    // This call's own entries are being filled: only those are looked for.
    const auto own = e != nullptr && e->state == EntryState::kFilling
                         ? std::find(fresh.begin(), fresh.end(), e)
                         : fresh.end();
    if (own != fresh.end()) {
      // A key repeated in this call: it is stored if, and when, its first
      // copy is (FinishSaveLocked answers it then).
      repeats.emplace_back(i, static_cast<size_t>(own - fresh.begin()));
      prev = e;
      continue;
    }
    if (Unsettled(e)) {
      // Still being filled by another save, or moved with no copy, past
      // RunSave's wait: neither this key nor the rest of the chain under it
      // can be answered as stored.
      broken = StillUnsettled(*e, "block");
      done.Set(i, broken);
      ++stats_.save_failures;
      continue;
    }
    const bool link = e != nullptr && NeedsCopy(e);
    if (e != nullptr && !link) {
      ++stats_.save_duplicates;  // stored already
      done.Set(i, Status::Ok());
      prev = e;
      continue;
    }
    if (i >= admitted || refused) {
      refused = true;
      done.Set(i, Status::Ok());
      ++stats_.save_not_admitted;
      continue;
    }
    std::optional<uint32_t> slot = arena_->Allocate();
    if (!slot) {
      // The rest of the chain would hang off a missing block: fail it too.
      broken = Status::ResourceExhausted(
          "save: tier '" + options_.tiers[0].name +
          "' is full and nothing can be evicted: its blocks are pinned (loads, lookups, "
          "saves in progress), being written to a lower tier that has not answered yet, or "
          "prefixes of stored blocks with no lower tier to take them");
      done.Set(i, broken);
      ++stats_.save_failures;
      continue;
    }
    if (link) {
      if (e->parent != nullptr) ++e->parent->filling_children;
      e->state = EntryState::kFilling;  // a link kept for its children gets its copy back
      // The lost copy's checksum stays until the new bytes are in (they may
      // differ, and then it goes): should this save fail, a load still
      // reading that copy checks what it gets against it.
    } else {
      try {
        e = index_.Insert({ns, keys[i]}, prev, options_.block_bytes, checkpoint);
      } catch (...) {
        arena_->Free(*slot);
        throw;
      }
      if (prev != nullptr) ++prev->filling_children;
    }
    e->host_slot = *slot;
    ++filling_slots_;
    ++e->pins;
    e->session_id = hints.session_id;
    e->expected_reuse = hints.expected_reuse;
    e->is_tail = i + 1 == keys.size();
    fresh.push_back(e);
    fresh_item.push_back(i);
    prev = e;
  }
}

void RuntimeImpl::FinishSaveLocked(const std::vector<IndexEntry*>& fresh,
                                   const std::vector<size_t>& fresh_item,
                                   const std::vector<std::pair<size_t, size_t>>& repeats,
                                   std::span<Status> result, CompletionSource& done) noexcept {
  // A block whose parent's copy failed fails too: it would hang off a
  // missing block. fresh[] is in chain order, so parents come first; a
  // parent in fresh is most often the entry before.
  auto parent_failed = [&](size_t j) {
    const IndexEntry* p = fresh[j]->parent;
    for (size_t k = j; k-- > 0;) {
      if (fresh[k] == p) return !result[k].ok();
    }
    return false;
  };
  for (size_t j = 0; j < fresh.size(); ++j) {
    if (result[j].ok() && parent_failed(j)) {
      result[j] = Status::Cancelled("its parent block was not copied");
    }
  }
  const uint64_t now = NowNs();
  uint64_t written = 0;
  // Deepest first, so that parents end up more recent than their children
  // and the least recent end of the list holds leaves.
  for (size_t j = fresh.size(); j-- > 0;) {
    IndexEntry* e = fresh[j];
    --filling_slots_;
    --e->pins;
    if (e->parent != nullptr) --e->parent->filling_children;
    if (result[j].ok()) {
      e->state = EntryState::kReady;
      try {
        index_.AddLocation(e, 0, now);
      } catch (...) {
        // Out of memory before the index changed, or a policy's observer
        // threw after: the copy is stored if the index has it.
        if (!e->In(0)) result[j] = Status::ResourceExhausted("out of memory indexing the block");
      }
    }
    if (result[j].ok()) {
      // The new bytes may differ from a lost copy's: its checksum must not
      // be written (and checked) with them.
      e->checksum.reset();
      e->inserted_ns = now;
      written += e->bytes;
      done.Set(fresh_item[j], Status::Ok(), e->bytes);
      ++stats_.saved_blocks;
      ++tier_counts_[0].hub_blocks_in;
      tier_counts_[0].hub_bytes_in += e->bytes;
    } else {
      arena_->Free(e->host_slot);
      e->host_slot = kNoSlot;
      e->state = EntryState::kReady;  // lets Erase clean up emptied ancestors
      // Another save may have chained children under it while it was being
      // filled: then it stays, as a link with no copy, until they go.
      if (e->children == 0 && e->pins == 0) index_.Erase(e);
      done.Set(fresh_item[j], result[j].WithContext("save: copy from the engine"));
      ++stats_.save_failures;
    }
  }
  for (const auto& [item, j] : repeats) {
    if (result[j].ok()) {
      done.Set(item, Status::Ok());  // stored by its first occurrence
      ++stats_.save_duplicates;
    } else {
      done.Set(item, result[j].WithContext("save: copy from the engine"));
      ++stats_.save_failures;
    }
  }
  try {
    policies_->OnWritten(0, written, now);
  } catch (...) {  // a write budget that could not record it: the saves stand
  }
  // Saves waiting for these fills to end (RunSave); under the lock, so a
  // waiter cannot miss it between its check and its wait.
  if (!fresh.empty()) {
    fills_done_.notify_all();
    NoteHubRoomLocked();  // a block a load may take, or a free slot
  }
}

}  // namespace kvtier::internal
