// The load path: hub slots (staged from lower tiers when needed) -> engine
// pages, on a worker thread, within the caller's deadline.
#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/runtime_impl.h"
#include "kvtier/block_header.h"

namespace kvtier::internal {
namespace {

// "<prefix><detail>", or the prefix alone when memory is too short to join
// them: a load answers each block, whatever the allocator says.
Status Joined(StatusCode code, std::string_view prefix, std::string_view detail,
              std::string_view suffix = {}) noexcept {
  return DescribedStatus(code, prefix, [&] {
    std::string m(prefix);
    m += detail;
    m += suffix;
    return Status(code, m);
  });
}

Status NotStored(const BlockKey& key) noexcept {
  return DescribedStatus(StatusCode::kNotFound, "load: block is not stored", [&] {
    return Joined(StatusCode::kNotFound, "load: block ", ToHex(key), " is not stored");
  });
}

}  // namespace

void RuntimeImpl::RunLoad(NamespaceId ns, const std::vector<BlockKey>& keys,
                          const std::vector<uint32_t>& blocks,
                          std::chrono::steady_clock::time_point deadline, const LayerDone& on_layer,
                          CompletionSource& done) {
  const size_t n = keys.size();
  // All that the load needs is allocated before the first pin: from there
  // on, whatever throws must let go of the pins (drop_pins).
  std::vector<IndexEntry*> entries(n, nullptr);
  std::vector<uint32_t> source_tier(n, 0);
  std::vector<Status> results(n);
  size_t below_hub = 0;
  std::vector<BlockCopy> copies;
  std::vector<size_t> copy_item;
  std::vector<Status> copied;
  std::vector<uint32_t> staged(n, kNoSlot);
  copies.reserve(n);
  copy_item.reserve(n);
  copied.reserve(n);
  // on_layer is the engine's code: an exception from it must not unwind
  // through the copy engine (with whatever copy engine runs it) or leave
  // this load's pins held. Its blocks end Internal; the copy itself runs on.
  // Built before anything is pinned: the std::function allocates.
  std::atomic<bool> threw{false};
  std::string thrown;
  auto note = [&](const char* what) {
    if (threw.exchange(true)) return;
    try {
      thrown = what;
    } catch (...) {  // out of memory for the message: the failure alone
    }
  };
  const LayerDone layer_done = [&](uint32_t layer) {
    done.SetLayersDone(layer + 1);
    if (!on_layer || threw.load(std::memory_order_relaxed)) return;
    try {
      on_layer(layer);
    } catch (const std::exception& e) {
      note(e.what());
    } catch (...) {
      note("an exception that is not a std::exception");
    }
  };
  // What throws after the pins are taken (memory running out, a policy)
  // fails the job, and must let go of them, which would otherwise keep the
  // blocks for good. REQUIRES: mu_ held.
  auto drop_pins = [&] {
    for (IndexEntry*& e : entries) {
      if (e != nullptr) DropPinLocked(e);
      e = nullptr;
    }
  };
  {
    std::lock_guard lock(mu_);
    stats_.load_blocks += n;
    const uint64_t now = NowNs();
    try {
      for (size_t i = n; i-- > 0;) {  // deepest first: see RunSave
        IndexEntry* e = index_.Find({ns, keys[i]});
        if (e == nullptr || e->state != EntryState::kReady || e->locations == 0) {
          results[i] = NotStored(keys[i]);
          continue;
        }
        ++e->pins;
        entries[i] = e;
        source_tier[i] = e->FastestTier();
        below_hub += e->In(0) ? 0 : 1;
      }
      // The hit the use ended at: the last of the leading run found (a tier
      // that refreshes only the deepest hit leaves the prefix above it as it
      // was). Touched deepest first, as found.
      size_t lead = 0;
      while (lead < n && entries[lead] != nullptr) ++lead;
      for (size_t i = n; i-- > 0;) {
        if (entries[i] != nullptr) index_.Touch(entries[i], now, i + 1 == lead);
      }
    } catch (...) {
      drop_pins();
      throw;
    }
  }

  if (below_hub > 0) {
    try {
      StageFromLowerTiers(ns, entries, staged, deadline, results);
    } catch (...) {
      // The eviction that made room threw (a lower tier's Usage() or a
      // policy with a bug), or memory ran out: the job ends Internal
      // (Submit), and the load lets go of its pins, which would otherwise
      // keep the blocks for good, and of the slots still staged. None of
      // them is one a read may still land in: a read ends, or is handed its
      // slots (ReadBatch), before anything can throw.
      std::lock_guard lock(mu_);
      for (uint32_t slot : staged) {
        if (slot != kNoSlot) arena_->Free(slot);
      }
      drop_pins();
      throw;
    }
  }

  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      if (!results[i].ok()) continue;
      // A pinned entry keeps the hub copy it was found with or given; checked
      // all the same: the slot of an entry not ready in the hub is not its.
      if (entries[i]->state != EntryState::kReady || !entries[i]->In(0)) {
        results[i] = NotStored(keys[i]);
        continue;
      }
      copies.push_back({blocks[i], arena_->Slot(entries[i]->host_slot)});  // reserved
      copy_item.push_back(i);
    }
  }
  copied.resize(copies.size());  // within what was reserved: allocates nothing
  RunCopy(/*gather=*/false, copies, layer_done, copied);
  if (threw) {
    const Status failed = Joined(StatusCode::kInternal, "on_layer failed: ", thrown);
    for (Status& st : copied) {
      if (st.ok()) st = failed;
    }
  }

  std::lock_guard lock(mu_);
  for (size_t j = 0; j < copy_item.size(); ++j) {
    size_t i = copy_item[j];
    if (!copied[j].ok()) {
      results[i] = copied[j].WithContext("load: copy into the engine");
      continue;
    }
    ++tier_counts_[source_tier[i]].hit_blocks;
    tier_counts_[0].hub_bytes_out += entries[i]->bytes;
  }
  for (size_t i = 0; i < n; ++i) {
    if (results[i].ok()) {
      ++stats_.loaded_blocks;
      done.Set(i, Status::Ok(), entries[i]->bytes);
    } else {
      ++stats_.load_failures;
      done.Set(i, results[i]);
    }
    if (entries[i] != nullptr) DropPinLocked(entries[i]);
  }
}

void RuntimeImpl::StageFromLowerTiers(NamespaceId ns, std::vector<IndexEntry*>& entries,
                                      std::vector<uint32_t>& staged,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::vector<Status>& results) {
  // A key loaded into several engine blocks is staged once; its later items
  // copy from the same hub slot, or fail as its first one did.
  std::unordered_map<const IndexEntry*, size_t> first_item;
  // Per item, the first item of its key when it repeats one; else itself.
  std::vector<size_t> first(entries.size());
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < entries.size(); ++i) {
      first[i] = i;
      const IndexEntry* e = entries[i];
      if (e != nullptr && !e->In(0)) first[i] = first_item.emplace(e, i).first->second;
    }
  }
  // Its own entries: pins on them (its own, its request's lookup) are not
  // waited for.
  EnsureHubRoom(first_item.size(), deadline, &entries);

  // tier -> items read from it
  std::map<uint32_t, std::vector<size_t>> by_tier;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < entries.size(); ++i) {
      IndexEntry* e = entries[i];
      if (e == nullptr || e->In(0) || first[i] != i) continue;
      if (e->locations == 0) {
        // Another load found the last copy lost or corrupt meanwhile.
        results[i] = Status::NotFound("load: block " + ToHex(e->id.key) + " is not stored");
        continue;
      }
      std::optional<uint32_t> slot = arena_->Allocate();
      if (!slot) {
        // Room was sought until the deadline (EnsureHubRoom), or until
        // nothing more could leave.
        const std::string why =
            "load: no free slot in tier '" + options_.tiers[0].name + "' to stage the block";
        results[i] = std::chrono::steady_clock::now() >= deadline
                         ? Status::DeadlineExceeded(why + " by the deadline")
                         : Status::ResourceExhausted(why);
        continue;
      }
      staged[i] = *slot;
      by_tier[e->FastestTier()].push_back(i);
    }
  }

  for (auto& [tier, all] : by_tier) {
    Tier& t = *lower_[tier - 1];
    // In batches the tier accepts (a long prompt can need more than one).
    const size_t batch = BatchLimit(t);
    for (size_t from = 0; from < all.size(); from += batch) {
      const std::vector<size_t> items(all.begin() + from,
                                      all.begin() + std::min(all.size(), from + batch));
      ReadBatch(ns, tier, entries, items, staged, deadline, results);
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (first[i] != i && !results[first[i]].ok()) results[i] = results[first[i]];
  }
}

void RuntimeImpl::ReadBatch(NamespaceId ns, uint32_t tier, std::vector<IndexEntry*>& entries,
                            const std::vector<size_t>& items, std::vector<uint32_t>& staged,
                            std::chrono::steady_clock::time_point deadline,
                            std::vector<Status>& results) {
  Tier& t = *lower_[tier - 1];
  std::vector<ReadOp> ops;
  ops.reserve(items.size());
  for (size_t i : items) ops.push_back({entries[i]->id.key, arena_->Slot(staged[i])});
  std::vector<NsKey> corrupt;
  corrupt.reserve(items.size());   // listing a corrupt copy below allocates nothing
  Completion c = t.Read(ns, ops);  // throws only before the read goes out
  if (!FinishedBy(c, deadline)) {
    if (HandOverLateRead(t, c, items, staged, results)) return;
    // Out of memory to hand the read over: waited for instead, so that no
    // slot is given back while it may still be read into.
    (void)c.Wait();
  }
  {
    std::lock_guard lock(mu_);
    std::vector<BlockKey> found;
    found.reserve(items.size());
    InstallStagedLocked(tier, entries, items, c, staged, results, found);
    if (found.empty()) return;
    // A corrupt copy is useless but still takes room in the tier, which
    // evicts only what the index names: have the tier drop it. Listed while
    // it runs (nothing writes the key there meanwhile) and, should it fail,
    // until a mover pass retries it. Not waited for (the load has a deadline).
    // Out of memory listing one: it and the rest stay in the tier unnamed,
    // and no key is left marked running without a Remove to end it.
    for (const BlockKey& k : found) {
      try {
        (void)QueueRemoveLocked(tier, {ns, k}, /*running=*/true);
      } catch (...) {
        break;
      }
      corrupt.push_back({ns, k});
    }
  }
  StartRemoves(tier, corrupt);
}

bool RuntimeImpl::HandOverLateRead(const Tier& t, const Completion& c,
                                   const std::vector<size_t>& items, std::vector<uint32_t>& staged,
                                   std::vector<Status>& results) noexcept {
  try {
    // Still running: the slots belong to the read until it ends.
    std::vector<uint32_t> late;
    late.reserve(items.size());
    for (size_t i : items) late.push_back(staged[i]);
    std::function<void()> free_slots = [this, late = std::move(late)] {
      std::lock_guard lock(mu_);
      for (uint32_t s : late) arena_->Free(s);
      EndLateCallLocked();
    };
    AddLateCallback(c, std::move(free_slots));
  } catch (...) {
    return false;
  }
  for (size_t i : items) {
    results[i] = Joined(StatusCode::kDeadlineExceeded, "load: block not read from tier '", t.name(),
                        "' before the deadline");
    staged[i] = kNoSlot;
  }
  return true;
}

void RuntimeImpl::InstallStagedLocked(uint32_t tier, std::vector<IndexEntry*>& entries,
                                      const std::vector<size_t>& items, const Completion& c,
                                      std::vector<uint32_t>& staged, std::vector<Status>& results,
                                      std::vector<BlockKey>& corrupt) {
  Tier& t = *lower_[tier - 1];
  const uint64_t now = NowNs();
  for (size_t j = 0; j < items.size(); ++j) {
    size_t i = items[j];
    IndexEntry* e = entries[i];
    if (e->state != EntryState::kReady) {
      // Its copy was found lost meanwhile and a save is filling it again:
      // the slot being filled is the save's, and the save decides the bytes.
      results[i] = Status::NotFound("load: block " + ToHex(e->id.key) +
                                    " lost its copy while being read; it is being saved again");
      arena_->Free(std::exchange(staged[i], kNoSlot));
      continue;
    }
    Status st = c.result(j);
    std::optional<uint64_t> theirs;  // the checksum of another writer's bytes, taken if installed
    // Counted here only when found here: the tier counts those it reports.
    if (st.ok() && c.bytes(j) != e->bytes) {
      st = Status::Corruption("load: tier '" + t.name() + "' returned " +
                              std::to_string(c.bytes(j)) + " bytes for a " +
                              std::to_string(e->bytes) + "-byte block");
      ++tier_counts_[tier].corruptions;
    } else if (st.ok() && e->checksum) {
      const uint64_t sum =
          PayloadChecksum(ChecksumKind::kXxh3_64, arena_->Slot(staged[i]).first(e->bytes));
      if (sum != *e->checksum && SharedTier(tier)) {
        // Another process sharing the tier saved this key again, with other
        // bytes (an engine's KV need not be the same bit for bit), and the
        // tier checked them against their own header: that writer's whole
        // block, as good as this process's. Taken, with its checksum.
        theirs = sum;
      } else if (sum != *e->checksum) {
        st = Status::Corruption("load: block " + ToHex(e->id.key) + " read from tier '" + t.name() +
                                "' fails its checksum");
        ++tier_counts_[tier].corruptions;
      }
    }
    if (st.ok()) TouchExpiringLocked(e, tier, now);  // the read restarted its expiry
    // A slot is given back, or handed to the entry, at once: should what
    // follows throw, the load gives back only the slots still staged.
    if (!st.ok()) {
      // Another load installed the block in the hub meanwhile (and this one
      // holds it pinned): served from there, whatever this read found.
      if (!e->In(0)) results[i] = st;
      arena_->Free(std::exchange(staged[i], kNoSlot));
      // The tier no longer has a usable copy (lost or corrupt): forget it.
      if (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kCorruption) {
        index_.DropLocation(e, tier);
      }
      if (st.code() == StatusCode::kCorruption) corrupt.push_back(e->id.key);  // reserved
    } else if (e->In(0)) {
      arena_->Free(std::exchange(staged[i], kNoSlot));  // another load promoted it meanwhile
    } else {
      if (theirs) e->checksum = theirs;
      e->host_slot = staged[i];
      try {
        index_.AddLocation(e, 0, now);
      } catch (...) {
        // Out of memory before the index took it, or a policy's observer
        // threw after: the slot is the entry's if the index has it.
        if (e->In(0)) staged[i] = kNoSlot;
        throw;
      }
      staged[i] = kNoSlot;
      ++tier_counts_[0].hub_blocks_in;
      tier_counts_[0].hub_bytes_in += e->bytes;
      metrics_.AddMove(tier, 0, 1, e->bytes);
    }
  }
}

}  // namespace kvtier::internal
