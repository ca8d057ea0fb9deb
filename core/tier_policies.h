// TierPolicies: the admission chain and the eviction policy of every tier,
// owned by the runtime. Policies are not thread-safe: the runtime calls every
// method under its index lock (RuntimeImpl::mu_).
//
// It also observes the block index (IndexObserver), so an eviction policy
// with its own state (s3fifo) hears of every block entering, leaving or
// being used in its tier, in step with the index.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/block_index.h"
#include "kvtier/options.h"
#include "kvtier/policy.h"

namespace kvtier::internal {

// The 64-bit id the policies know a block by: a fold of its namespace and
// its 128-bit key. Two blocks of different namespaces get different ids.
uint64_t PolicyId(const NsKey& id);

class TierPolicies final : public IndexObserver {
 public:
  // Builds every tier's policies from options.tiers[t] (eviction, admission,
  // policy knobs). InvalidArgument names the tier when a policy refuses its
  // knobs.
  static Result<std::unique_ptr<TierPolicies>> Create(const RuntimeOptions& options);

  // A lookup's chain, root first, seen by every tier's admission before the
  // engine prefills the misses.
  void ObserveRequest(NamespaceId ns, std::span<const BlockKey> keys, uint64_t now_ns);
  // What the policies know of `e`.
  BlockMeta MetaOf(const IndexEntry& e) const;
  // The tier as its admission sees it, from the tier's usage.
  TierState StateOf(size_t tier, uint64_t capacity_bytes, uint64_t used_bytes,
                    uint64_t now_ns) const;
  // Whether tier `tier`'s policies admit the block (every one must).
  bool Admit(size_t tier, const BlockMeta& block, const TierState& state);
  // True when tier `tier` admits with `always` alone: asking is then moot.
  bool admits_all(size_t tier) const { return tiers_[tier].admits_all; }
  // `bytes` of payload were written into tier `tier` after admits.
  void OnWritten(size_t tier, uint64_t bytes, uint64_t now_ns);

  // True when tier `tier` evicts by LRU: the index's recency order is then
  // the policy's order and Choose is not needed.
  bool lru(size_t tier) const { return tiers_[tier].lru; }
  // `may_take(e, children_taken)`: whether `e` may leave now, given how many
  // of its children this selection has already taken.
  using TakeCheck = std::function<bool(const IndexEntry&, uint32_t children_taken)>;
  // Up to `max` of `candidates` (BlockIndex::Victims output: leaves, and
  // parents whose children precede them) in the order tier `tier`'s eviction
  // policy ranks them, except that an entry is taken only once every child
  // it has in the tier is taken: children always leave before parents.
  std::vector<IndexEntry*> Choose(size_t tier, std::span<IndexEntry* const> candidates, size_t max,
                                  const TakeCheck& may_take, uint64_t now_ns);

  // IndexObserver: keeps each tier's eviction policy in step with the index.
  void OnAdd(const IndexEntry& e, size_t tier) override;
  void OnDrop(const IndexEntry& e, size_t tier) override;
  void OnTouch(const IndexEntry& e, size_t tier) override;

 private:
  struct PerTier {
    AdmissionChain admission;
    std::unique_ptr<EvictionPolicy> eviction;
    bool lru = true;
    bool admits_all = true;
    double read_bytes_per_s = 0;
    double read_latency_s = 0;
  };
  TierPolicies(uint32_t block_tokens, const ModelCost& cost, double gpu_flops_per_s)
      : block_tokens_(block_tokens), cost_(cost), gpu_flops_per_s_(gpu_flops_per_s) {}

  const uint32_t block_tokens_;
  const ModelCost cost_;
  const double gpu_flops_per_s_;
  std::vector<PerTier> tiers_;
  std::vector<uint64_t> ids_;  // ObserveRequest scratch
};

}  // namespace kvtier::internal
