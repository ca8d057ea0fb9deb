// Adopting blocks a lower tier holds that the index does not know: after a
// restart the index is empty, but an NVMe store still has the blocks saved
// before; a Redis or kvtier-memd tier shared with other processes (or
// hosts) has the blocks they saved. On a lookup miss the runtime asks the
// tiers that can answer from memory (TierCapabilities::local_index) and the
// shared ones whose reads check each block (TierCapabilities::shared and
// checksummed), and indexes the leading keys they hold.
#include "core/runtime_impl.h"

namespace kvtier::internal {
namespace {

// A shared tier whose Contains failed or was late is left out of adoption
// for this long: a lookup does not wait on a server that is down each time.
constexpr std::chrono::seconds kSharedTierBackoff(1);

// Sets `bit` in present[j] for the leading keys of rest[begin..] that `tier`
// holds, asking in batches of `batch` keys while that run lasts. Sets *end
// to where the run ends (the first key the tier lacks, or rest.size()).
// False when the tier failed to answer by `deadline`, or with an error other
// than NotFound.
bool MarkLeadingHeld(Tier& tier, size_t batch, NamespaceId ns, std::span<const BlockKey> rest,
                     size_t begin, uint32_t bit, std::chrono::steady_clock::time_point deadline,
                     std::vector<uint32_t>& present, size_t* end) {
  *end = begin;
  for (size_t from = begin; from < rest.size(); from += batch) {
    const size_t n = std::min(batch, rest.size() - from);
    Completion c = tier.Contains(ns, rest.subspan(from, n));
    const auto left = std::max<std::chrono::nanoseconds>(
        std::chrono::nanoseconds(0), deadline - std::chrono::steady_clock::now());
    if (!c.WaitFor(left).ok() && !c.Poll()) return false;
    size_t held = 0;
    while (held < n && c.result(held).ok()) present[from + held++] |= bit;
    *end = from + held;
    if (held < n) return c.result(held).code() == StatusCode::kNotFound;
  }
  return true;
}

}  // namespace

void RuntimeImpl::AdoptStoredBlocks(NamespaceId ns, std::span<const BlockKey> keys,
                                    size_t parts_from) {
  if (!has_adoptable_tier_) return;
  size_t first = 0;
  uint64_t removes_before = 0;
  uint64_t epoch = 0;
  // Counted from before the first look at the index until the end, so that
  // every remove landing in between is seen (removed_during_adoption_).
  struct Running {
    RuntimeImpl* rt;
    ~Running() {
      std::lock_guard lock(rt->mu_);
      if (--rt->adoptions_running_ == 0) rt->removed_during_adoption_.clear();
    }
  };
  {
    std::lock_guard lock(mu_);
    ++adoptions_running_;
    epoch = adopt_epoch_;
    removes_before = removes_ended_;
    while (first < keys.size()) {
      IndexEntry* e = index_.Find({ns, keys[first]});
      if (e == nullptr) break;
      ++first;
    }
  }
  const Running running{this};
  if (first == keys.size()) return;
  std::span<const BlockKey> rest = keys.subspan(first);

  // The tiers to ask: those with a local index, and the shared ones whose
  // reads check each block (another process's bytes are trusted only
  // there) and that no option marks private, unless they are backing off.
  // A shared tier's backoff is 0 while it answers; after a failure, the
  // first lookup past the backoff claims the next try (pushing the backoff
  // on), so that lookups on other threads do not each wait on a suspect
  // tier.
  const uint64_t backoff = std::chrono::nanoseconds(kSharedTierBackoff).count();
  std::vector<size_t> asked;
  for (size_t t = 1; t < tier_count(); ++t) {
    const TierCapabilities& caps = lower_[t - 1]->capabilities();
    if (caps.local_index) {
      asked.push_back(t);
    } else if (adopt_shared_[t]) {
      std::atomic<uint64_t>& skip_until = adopt_skip_until_[t];
      uint64_t until = skip_until.load(std::memory_order_relaxed);
      if (until == 0 ||
          (NowNs() >= until && skip_until.compare_exchange_strong(until, NowNs() + backoff,
                                                                  std::memory_order_relaxed))) {
        asked.push_back(t);
      }
    }
  }
  // present[j]: the tiers holding rest[j]; only the leading run matters. A
  // chain may go on in another tier where one tier's run ends (leaf-first
  // demotion leaves its tail deeper than its head): the tiers that stopped
  // short of where the joint run ends are asked again from there, while it
  // grows. One wait bounds all of a tier's batches and rounds: a tier that
  // answers each batch just inside it would otherwise hold the lookup for as
  // many waits.
  std::vector<uint32_t> present(rest.size(), 0);
  std::vector<size_t> stop(tier_count(), 0);  // where each tier's run ended
  std::vector<bool> answered(tier_count(), true);
  std::vector<SteadyTime> deadline(tier_count(), SteadyTime::max());
  for (size_t from = 0;;) {
    for (size_t t : asked) {
      // Past the first round, a tier whose run reached `from` has answered
      // for rest[from] already (it lacks it).
      if (!answered[t] || (from != 0 && stop[t] >= from)) continue;
      if (deadline[t] == SteadyTime::max()) {
        deadline[t] = std::chrono::steady_clock::now() + kAdoptWait;
      }
      answered[t] = MarkLeadingHeld(*lower_[t - 1], BatchLimit(*lower_[t - 1]), ns, rest, from,
                                    1U << t, deadline[t], present, &stop[t]);
    }
    size_t end = from;
    while (end < rest.size() && present[end] != 0) ++end;
    if (end == from || end == rest.size()) break;
    from = end;
  }
  for (size_t t : asked) {
    if (adopt_shared_[t]) {
      adopt_skip_until_[t].store(answered[t] ? 0 : NowNs() + backoff, std::memory_order_relaxed);
    }
  }

  // claims[t]: the keys adopted as held in tier t.
  std::vector<std::vector<BlockKey>> claims(tier_count());
  {
    std::lock_guard lock(mu_);
    // A Remove that overlapped the Contains may have dropped a key after the
    // tier reported it: adopting it would index a block that is gone. The
    // blocks are adopted by a later lookup instead.
    if (removes_running_ != 0 || removes_ended_ != removes_before || adopt_epoch_ != epoch) return;
    IndexEntry* parent = first == 0 ? nullptr : index_.Find({ns, keys[first - 1]});
    if (first > 0 && parent == nullptr) return;  // removed meanwhile: the chain is cut
    const uint64_t now = NowNs();
    for (size_t j = 0; j < rest.size(); ++j) {
      // A copy whose Remove is pending there is on its way out: the retry
      // would delete what adoption indexed.
      for (size_t t = 1; t < tier_count(); ++t) {
        if (((present[j] >> t) & 1U) != 0 && pending_removes_[t].count({ns, rest[j]}) != 0) {
          present[j] &= ~(1U << t);
        }
      }
      // A copy whose Remove landed after the tier answered is gone.
      if (const auto it = removed_during_adoption_.find({ns, rest[j]});
          it != removed_during_adoption_.end()) {
        present[j] &= ~it->second;
      }
      if (present[j] == 0) break;
      IndexEntry* e = index_.Find({ns, rest[j]});
      if (e == nullptr) {
        e = index_.Insert({ns, rest[j]}, parent, options_.block_bytes, first + j >= parts_from);
        e->state = EntryState::kReady;
        e->inserted_ns = now;
        e->state_unasked = options_.state_blocks > 0 && first + j < parts_from;
        try {
          for (size_t t = 1; t < tier_count(); ++t) {
            if ((present[j] >> t) & 1U) {
              index_.AddLocation(e, t, now);
              claims[t].push_back(rest[j]);
            }
          }
        } catch (...) {
          // Out of memory before any copy was recorded: an entry with none
          // would stop every lookup of the chain, and this key would never
          // be asked about again (it is "known").
          EraseIfUnheldLocked(e);
          throw;
        }
        ++stats_.adopted_blocks;
      }
      parent = e;
    }
  }
  // Each tier learns which of its blocks the runtime now accounts for (and
  // will evict itself): the adopted run, no key past it. Outside mu_, as
  // every tier call; until then the tier may still drop one (a load then
  // misses it, as any lost copy).
  bool shared_claims = false;
  for (size_t t = 1; t < tier_count(); ++t) {
    if (claims[t].empty()) continue;
    lower_[t - 1]->Claim(ns, claims[t]);
    shared_claims = shared_claims || adopt_shared_[t];
  }
  // A shared tier counts what it is told it holds. A block that left the
  // index's copy in it before the Claim (evicted, or found missing by a
  // load) would stay counted there for good: it is removed again, which
  // frees the count (a remove of an absent key is harmless).
  // Listed as pending removes while they run, as any other, so that a
  // failed one is retried and a write of the key meanwhile waits for it.
  if (!shared_claims) return;
  std::vector<std::vector<NsKey>> gone(tier_count());
  for (size_t t = 1; t < tier_count(); ++t) gone[t].reserve(claims[t].size());
  {
    std::lock_guard lock(mu_);
    for (size_t t = 1; t < tier_count(); ++t) {
      if (!adopt_shared_[t]) continue;
      for (const BlockKey& key : claims[t]) {
        const IndexEntry* e = index_.Find({ns, key});
        if (e != nullptr && ((e->locations >> t) & 1U) != 0) continue;
        try {
          (void)QueueRemoveLocked(t, {ns, key}, /*running=*/true);
        } catch (...) {  // out of memory: this key stays counted there
          continue;
        }
        gone[t].push_back({ns, key});  // reserved: allocates nothing
      }
    }
  }
  for (size_t t = 1; t < tier_count(); ++t) {
    if (!gone[t].empty()) StartRemoves(t, gone[t]);
  }
}

}  // namespace kvtier::internal
