// State checkpoints of hybrid models. A checkpoint of a block (its boundary)
// is stored as options_.state_blocks parts under keys derived from the
// boundary's (KeyHasher::StatePart), chained under it: the first part's
// parent is the boundary, each further part's the one before. So the
// index, the tiers and the mover treat parts as blocks, and the prefix rule
// does the rest: a part leaves a tier before the boundary (its parent) can,
// and a boundary with a checkpoint is never dropped from under it.
#include <algorithm>
#include <string>

#include "core/runtime_impl.h"

namespace kvtier::internal {

std::vector<BlockKey> RuntimeImpl::StateParts(NamespaceId ns, const BlockKey& boundary) const {
  const KeyHasher hasher(ns, options_.hash);
  std::vector<BlockKey> parts;
  parts.reserve(options_.state_blocks);
  for (uint32_t i = 0; i < options_.state_blocks; ++i) {
    parts.push_back(hasher.StatePart(boundary, i));
  }
  return parts;
}

bool RuntimeImpl::StateStoredLocked(const IndexEntry& boundary, std::vector<IndexEntry*>* parts) {
  if (!boundary.first_part_indexed) return false;  // no part's key to hash
  const NamespaceId ns = boundary.id.ns;
  const KeyHasher hasher(ns, options_.hash);
  const size_t before = parts != nullptr ? parts->size() : 0;
  for (uint32_t i = 0; i < options_.state_blocks; ++i) {
    IndexEntry* e = index_.Find({ns, hasher.StatePart(boundary.id.key, i)});
    if (e == nullptr || e->state != EntryState::kReady || e->locations == 0) {
      if (parts != nullptr) parts->resize(before);
      return false;
    }
    if (parts != nullptr) parts->push_back(e);
  }
  return true;
}

void RuntimeImpl::AdoptState(NamespaceId ns, std::span<const BlockKey> keys) {
  if (!has_adoptable_tier_ || options_.state_blocks == 0) return;
  // The leading keys adopted with their checkpoint not asked for, deeper
  // than any whose checkpoint is stored (the lookup answers that one anyway).
  std::vector<size_t> unasked;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      const IndexEntry* e = index_.Find({ns, keys[i]});
      if (e == nullptr) break;
      if (StateStoredLocked(*e, nullptr)) unasked.clear();
      if (e->state_unasked) unasked.push_back(i);
    }
  }
  // Deepest first, each asked once, until one is found. Questions start
  // only within one wait (each then has its own): a chain of many adopted
  // blocks with no checkpoint stored would otherwise hold the lookup for a
  // wait each. Those not asked in time are asked by later lookups. (Cutting
  // the last question's wait short instead would take a shared tier that
  // answers in a round trip for one that failed to answer.)
  const SteadyTime until = std::chrono::steady_clock::now() + kAdoptWait;
  for (auto it = unasked.rbegin(); it != unasked.rend(); ++it) {
    if (std::chrono::steady_clock::now() >= until) return;
    const size_t j = *it;
    {
      std::lock_guard lock(mu_);
      IndexEntry* e = index_.Find({ns, keys[j]});
      if (e == nullptr || !e->state_unasked) continue;  // removed, or another lookup asks
      e->state_unasked = false;
    }
    std::vector<BlockKey> chain(keys.begin(), keys.begin() + j + 1);
    const std::vector<BlockKey> parts = StateParts(ns, keys[j]);
    chain.insert(chain.end(), parts.begin(), parts.end());
    AdoptStoredBlocks(ns, chain, j + 1);
    std::lock_guard lock(mu_);
    const IndexEntry* e = index_.Find({ns, keys[j]});
    if (e != nullptr && StateStoredLocked(*e, nullptr)) return;
  }
}

size_t RuntimeImpl::ResumablePrefixLocked(NamespaceId ns, std::span<const BlockKey> keys,
                                          std::vector<IndexEntry*>& hit,
                                          std::vector<IndexEntry*>* parts) {
  for (const BlockKey& key : keys) {
    IndexEntry* e = index_.Find({ns, key});
    if (e == nullptr || e->state != EntryState::kReady || e->locations == 0) break;
    hit.push_back(e);
  }
  const size_t stored = hit.size();
  if (options_.state_blocks > 0) {
    // A hybrid model resumes only where its state was kept.
    size_t n = stored;
    while (n > 0 && !StateStoredLocked(*hit[n - 1], parts)) --n;
    hit.resize(n);
  }
  return stored;
}

uint32_t RuntimeImpl::SavedPrefixLocked(NamespaceId ns, std::span<const BlockKey> keys) {
  std::vector<IndexEntry*> hit;
  ResumablePrefixLocked(ns, keys, hit, nullptr);
  return static_cast<uint32_t>(hit.size());
}

bool RuntimeImpl::LastPart(const IndexEntry& e) const {
  const IndexEntry* boundary = TierPolicies::BoundaryOf(e);
  return boundary == nullptr || e.depth == boundary->depth + options_.state_blocks;
}

Status RuntimeImpl::CheckStateBlocks(std::span<const uint32_t> blocks, const char* op) const {
  if (options_.state_blocks == 0) {
    return Status::InvalidArgument(
        std::string(op) +
        ": state checkpoints are off (state_blocks is 0); set "
        "runtime.state_blocks to the engine blocks one checkpoint takes");
  }
  if (blocks.size() != options_.state_blocks) {
    return Status::InvalidArgument(std::string(op) + ": got " + std::to_string(blocks.size()) +
                                   " engine blocks; a state checkpoint takes " +
                                   std::to_string(options_.state_blocks) + " (state_blocks)");
  }
  return Status::Ok();
}

Completion RuntimeImpl::SaveState(NamespaceId ns, const BlockKey& boundary,
                                  std::span<const uint32_t> engine_blocks,
                                  const SaveOptions& options) {
  // The items a checkpoint has (engine_blocks of any other count is
  // refused): a wrong count, such as a negative one cast to size_t, must not
  // size the answer, nor the failures counted. An error covers at least one
  // item, so that an empty call reports it too.
  const size_t items = std::max<size_t>(1, options_.state_blocks);
  return Guarded(RuntimeMetrics::Op::kSave, items, [&] {
    if (Status st = CheckStateBlocks(engine_blocks, "save state"); !st.ok()) {
      return Refuse(RuntimeMetrics::Op::kSave, items, st);
    }
    std::vector<BlockKey> k = StateParts(ns, boundary);
    if (Status st = CheckBlocks(k, engine_blocks); !st.ok()) {
      return Refuse(RuntimeMetrics::Op::kSave, items, st.WithContext("save state"));
    }
    return SubmitSave(ns, boundary, std::move(k), {engine_blocks.begin(), engine_blocks.end()},
                      options, /*checkpoint=*/true);
  });
}

Completion RuntimeImpl::LoadState(NamespaceId ns, const BlockKey& boundary,
                                  std::span<const uint32_t> engine_blocks,
                                  std::chrono::nanoseconds timeout) {
  const size_t items = std::max<size_t>(1, options_.state_blocks);  // as in SaveState
  return Guarded(RuntimeMetrics::Op::kLoad, items, [&] {
    if (Status st = CheckStateBlocks(engine_blocks, "load state"); !st.ok()) {
      return Refuse(RuntimeMetrics::Op::kLoad, items, st);
    }
    return Load(ns, StateParts(ns, boundary), engine_blocks, timeout, {});
  });
}

}  // namespace kvtier::internal
