// The sweep's tiered cache. Leaves are tracked per tier: a block is a leaf of
// tier t when no stored child of it is in t. Only leaves are offered to the
// eviction policy, so children always leave before their parents. A block in
// the hub implies its parent is in the hub, so a lower-tier leaf that is not
// in the hub has no child anywhere.
#include "tools/bench/sweep_cache.h"

#include <algorithm>

namespace kvtier::bench {

TieredCache::TieredCache(std::array<SimTierConfig, kSimTiers> tiers, uint64_t block_bytes,
                         double gpu_flops_per_s, uint32_t evict_batch,
                         std::unique_ptr<internal::SharedReuseModels> reuse_models)
    : reuse_models_(std::move(reuse_models)),
      tiers_(std::move(tiers)),
      block_bytes_(block_bytes),
      gpu_flops_per_s_(gpu_flops_per_s),
      evict_batch_(std::max<uint32_t>(1, evict_batch)) {}

size_t TieredCache::Lookup(std::span<const SimBlock> chain, std::vector<uint8_t>* tier_of) const {
  tier_of->clear();
  for (const SimBlock& b : chain) {
    auto it = map_.find(b.id);
    if (it == map_.end() || it->second.locations == 0) break;
    tier_of->push_back(static_cast<uint8_t>(__builtin_ctz(it->second.locations)));
  }
  return tier_of->size();
}

BlockMeta TieredCache::MetaFor(const Entry& e, size_t t) const {
  BlockMeta m = e.meta;
  if (tiers_[t].deepest_only) m.last_use_ns = e.deepest_use_ns;
  return m;
}

void TieredCache::Use(std::span<const SimBlock> chain, size_t hits, uint64_t now_ns) {
  busy_.clear();
  for (const SimBlock& b : chain) busy_.insert(b.id);
  for (size_t j = hits; j-- > 0;) {
    Entry& e = map_.at(chain[j].id);
    e.meta.next_use = chain[j].next_use;
    ++e.meta.hits;
    ++e.meta.sightings;
    const bool deepest = j + 1 == hits;
    e.meta.last_use_ns = now_ns;
    if (deepest) e.deepest_use_ns = now_ns;
    for (size_t t = 0; t < kSimTiers; ++t) {
      if (!e.In(t) || !tiers_[t].eviction || (tiers_[t].deepest_only && !deepest)) continue;
      tiers_[t].eviction->OnAccess(MetaFor(e, t));
    }
  }
  // Lower-tier hits are read through the hub, which keeps a copy.
  for (size_t j = 0; j < hits; ++j) {
    Entry& e = map_.at(chain[j].id);
    if (e.In(0)) continue;
    MakeRoom(0, now_ns);
    AddLocation(e, 0, now_ns);
    tiers_[0].eviction->OnInsert(MetaFor(e, 0));
    counters_[0].bytes_written += block_bytes_;
    ++counters_[0].blocks_written;
  }
  for (size_t j = hits; j < chain.size(); ++j) {
    if (map_.count(chain[j].id) != 0) continue;
    MakeRoom(0, now_ns);
    if (blocks_in_[0] >= tiers_[0].capacity_blocks) break;  // hub full of pinned blocks
    Entry& e = map_[chain[j].id];
    e.meta.id = chain[j].id;
    e.meta.depth = static_cast<uint32_t>(j);
    e.meta.tokens = chain[j].tokens;
    e.meta.bytes = block_bytes_;
    e.meta.flops = chain[j].flops;
    e.meta.sightings = 1;
    e.meta.last_use_ns = e.meta.inserted_ns = e.deepest_use_ns = now_ns;
    e.meta.next_use = chain[j].next_use;
    e.meta.is_tail = j + 1 == chain.size();
    if (j > 0) {
      e.parent = chain[j - 1].id;
      e.has_parent = true;
      ++map_.at(e.parent).children;
    }
    AddLocation(e, 0, now_ns);
    tiers_[0].eviction->OnInsert(MetaFor(e, 0));
    counters_[0].bytes_written += block_bytes_;
    ++counters_[0].blocks_written;
  }
  busy_.clear();
}

void TieredCache::ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks,
                                 const RequestHints& hints, uint64_t now_ns) {
  if (reuse_models_) reuse_models_->ObserveRequest(chain, full_blocks);
  tiers_[1].admission.ObserveRequest(chain, full_blocks, hints, now_ns);
  for (SimTierConfig& t : tiers_) {
    if (t.eviction) t.eviction->ObserveRequest(chain, full_blocks, hints, now_ns);
  }
}

void TieredCache::ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens,
                                uint64_t now_ns) {
  if (reuse_models_) reuse_models_->ObserveFinish(chain, output_tokens);
  tiers_[1].admission.ObserveFinish(chain, output_tokens, now_ns);
  for (SimTierConfig& t : tiers_) {
    if (t.eviction) t.eviction->ObserveFinish(chain, output_tokens, now_ns);
  }
}

void TieredCache::AddLocation(Entry& e, size_t t, uint64_t) {
  e.locations |= static_cast<uint8_t>(1U << t);
  ++blocks_in_[t];
  if (e.has_parent) {
    Entry& p = map_.at(e.parent);
    if (p.children_in[t]++ == 0 && p.In(t)) leaves_[t].erase(e.parent);
  }
  if (e.children_in[t] == 0) leaves_[t].insert(e.meta.id);
}

void TieredCache::DropLocation(Entry& e, size_t t) {
  e.locations &= static_cast<uint8_t>(~(1U << t));
  --blocks_in_[t];
  leaves_[t].erase(e.meta.id);
  if (e.has_parent) {
    Entry& p = map_.at(e.parent);
    if (--p.children_in[t] == 0 && p.In(t)) leaves_[t].insert(e.parent);
  }
  if (tiers_[t].eviction) tiers_[t].eviction->OnRemove(e.meta.id);
}

void TieredCache::EraseIfHomeless(uint64_t id) {
  auto it = map_.find(id);
  if (it == map_.end() || it->second.locations != 0) return;
  if (it->second.has_parent) --map_.at(it->second.parent).children;
  map_.erase(it);
}

std::vector<BlockMeta> TieredCache::Candidates(size_t t) const {
  std::vector<BlockMeta> out;
  out.reserve(leaves_[t].size());
  for (uint64_t id : leaves_[t]) {
    if (busy_.count(id) != 0) continue;
    const Entry& e = map_.at(id);
    if (t > 0 && !e.In(0) && e.children != 0) continue;  // would strand a child
    out.push_back(MetaFor(e, t));
    out.back().backed = (e.locations >> (t + 1)) != 0;
  }
  // Hash-set order is arbitrary; sort by id so runs are reproducible.
  std::sort(out.begin(), out.end(),
            [](const BlockMeta& a, const BlockMeta& b) { return a.id < b.id; });
  return out;
}

void TieredCache::MakeRoom(size_t t, uint64_t now_ns) {
  const uint64_t cap = tiers_[t].capacity_blocks;
  while (blocks_in_[t] >= cap) {
    std::vector<BlockMeta> cands = Candidates(t);
    if (cands.empty()) return;
    if (tiers_[t].oracle) {
      std::stable_sort(cands.begin(), cands.end(), [](const BlockMeta& a, const BlockMeta& b) {
        return a.next_use > b.next_use;
      });
      farthest_[t] = cands.front().next_use;
    } else {
      tiers_[t].eviction->Order(cands, now_ns);
    }
    const size_t want = std::max<size_t>(evict_batch_, blocks_in_[t] - cap + 1);
    const size_t n = std::min(want, cands.size());
    for (size_t i = 0; i < n; ++i) {
      auto it = map_.find(cands[i].id);
      if (it == map_.end() || !it->second.In(t)) continue;
      Entry& e = it->second;
      if (t == 0) Demote(e, now_ns);
      // Demotion may have dropped this entry's tier-1 parent; `e` is intact.
      if (t == 0 && !e.In(1) && e.children_in[1] != 0) continue;  // could not write
      DropLocation(e, t);
      ++counters_[t].evicted;
      EraseIfHomeless(cands[i].id);
    }
  }
}

bool TieredCache::Admit(size_t t, Entry& e, uint64_t now_ns) {
  if (tiers_[t].oracle) {
    if (e.meta.next_use == UINT64_MAX) return false;
    if (blocks_in_[t] >= tiers_[t].capacity_blocks && farthest_[t] == 0) {
      for (const BlockMeta& c : Candidates(t)) farthest_[t] = std::max(farthest_[t], c.next_use);
    }
    return blocks_in_[t] < tiers_[t].capacity_blocks || e.meta.next_use < farthest_[t];
  }
  TierState st;
  st.capacity_bytes = tiers_[t].capacity_blocks * block_bytes_;
  st.used_bytes = blocks_in_[t] * block_bytes_;
  st.read_bytes_per_s = tiers_[t].read_bytes_per_s;
  st.read_latency_s = tiers_[t].read_latency_s;
  st.gpu_flops_per_s = gpu_flops_per_s_;
  st.now_ns = now_ns;
  return tiers_[t].admission.Admit(MetaFor(e, t), st);
}

void TieredCache::Demote(Entry& e, uint64_t now_ns) {
  if (e.In(1) || tiers_[1].capacity_blocks == 0) return;
  const bool admitted = Admit(1, e, now_ns);
  if (!admitted && e.children_in[1] == 0) {
    ++counters_[1].rejected;
    return;
  }
  // The victim is in the hub and so is its parent: nothing MakeRoom(1) drops
  // can strand it.
  busy_.insert(e.meta.id);
  MakeRoom(1, now_ns);
  busy_.erase(e.meta.id);
  // A refused block is written only while a child below still needs it:
  // MakeRoom may just have evicted that child.
  if (e.children_in[1] == 0 && (!admitted || blocks_in_[1] >= tiers_[1].capacity_blocks)) {
    ++counters_[1].rejected;
    return;
  }
  if (!admitted) ++counters_[1].forced_writes;
  AddLocation(e, 1, now_ns);
  counters_[1].bytes_written += block_bytes_;
  ++counters_[1].blocks_written;
  tiers_[1].admission.OnWritten(block_bytes_, now_ns);
  tiers_[1].eviction->OnInsert(MetaFor(e, 1));
}

}  // namespace kvtier::bench
