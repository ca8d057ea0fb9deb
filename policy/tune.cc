// α tuning for flop_aware: replay a recent window against a one-tier,
// leaf-first cache at each α of a grid and keep the best. As in the runtime,
// a hit refreshes the recency of the deepest block it matched only.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kvtier/policy.h"

namespace kvtier {
namespace {

// Metadata-only cache: an entry's parent is the block before it in the
// chain; only entries with no stored child may be evicted.
class LeafCache {
 public:
  LeafCache(uint64_t capacity, double alpha) : capacity_(capacity) {
    PolicyKnobs knobs;
    knobs.flop_alpha = alpha;
    auto p = CreateEvictionPolicy("flop_aware", knobs);
    policy_ = std::move(*p);
  }

  double Run(const TuneRequest& r, uint64_t t) {
    double saved = 0;
    size_t i = 0;
    Entry* deepest = nullptr;
    for (; i < r.blocks.size(); ++i) {
      auto it = map_.find(r.blocks[i].id);
      if (it == map_.end()) break;
      saved += r.blocks[i].flops;
      deepest = &it->second;
    }
    // flop_aware refreshes the deepest hit only (BlockIndex::set_deepest_only).
    if (deepest != nullptr) deepest->meta.last_use_ns = t;
    busy_.clear();
    for (const BlockMeta& b : r.blocks) busy_.insert(b.id);
    for (size_t j = i; j < r.blocks.size() && capacity_ != 0; ++j) {
      // A block cached already past the first miss (a lookup that did not
      // start at the root, or named a key twice) would be given a second
      // parent: the chain stops there, as the runtime's index would.
      if (map_.count(r.blocks[j].id) != 0) break;
      if (map_.size() >= capacity_) EvictBatch();
      if (map_.size() >= capacity_) break;
      Entry& e = map_[r.blocks[j].id];
      e.meta = r.blocks[j];
      e.meta.last_use_ns = t;
      e.has_parent = j > 0;
      if (e.has_parent) {
        e.parent = r.blocks[j - 1].id;
        if (map_[e.parent].children++ == 0) leaves_.erase(e.parent);
      }
      leaves_.insert(e.meta.id);
    }
    return saved;
  }

 private:
  struct Entry {
    BlockMeta meta;
    uint64_t parent = 0;
    bool has_parent = false;
    uint32_t children = 0;
  };
  // Evicts a 1/64 of the capacity (at least one block) from the current
  // leaves, as a mover pass between watermarks would.
  void EvictBatch() {
    std::vector<BlockMeta> leaves;
    for (uint64_t id : leaves_) {
      if (busy_.count(id) == 0) leaves.push_back(map_.at(id).meta);
    }
    std::sort(leaves.begin(), leaves.end(),
              [](const BlockMeta& a, const BlockMeta& b) { return a.id < b.id; });
    policy_->Order(leaves, 0);
    const size_t n = std::min<size_t>(leaves.size(), std::max<uint64_t>(1, capacity_ / 64));
    for (size_t k = 0; k < n; ++k) {
      auto it = map_.find(leaves[k].id);
      leaves_.erase(it->first);
      if (it->second.has_parent) {
        Entry& p = map_.at(it->second.parent);
        if (--p.children == 0) leaves_.insert(it->second.parent);
      }
      map_.erase(it);
    }
  }

  std::unordered_set<uint64_t> leaves_;
  std::unordered_set<uint64_t> busy_;
  uint64_t capacity_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::unordered_map<uint64_t, Entry> map_;
};

}  // namespace

double ReplayFlopsSaved(std::span<const TuneRequest> window, uint64_t capacity_blocks,
                        double alpha) {
  LeafCache cache(capacity_blocks, alpha);
  double saved = 0;
  uint64_t t = 0;
  for (const TuneRequest& r : window) saved += cache.Run(r, ++t);
  return saved;
}

double TuneAlpha(std::span<const TuneRequest> window, uint64_t capacity_blocks,
                 std::span<const double> grid) {
  double best_alpha = grid.empty() ? 0.0 : grid[0];
  double best = -1;
  for (double a : grid) {
    const double s = ReplayFlopsSaved(window, capacity_blocks, a);
    if (s > best) {
      best = s;
      best_alpha = a;
    }
  }
  return best_alpha;
}

}  // namespace kvtier
