// TierPolicies: the admission chain and the eviction policy of every tier,
// owned by the runtime. Policies are not thread-safe: the runtime calls every
// method under its index lock (RuntimeImpl::mu_).
//
// It also observes the block index (IndexObserver), so an eviction policy
// with its own state (s3fifo) hears of every block entering, leaving or
// being used in its tier, in step with the index.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/block_index.h"
#include "kvtier/options.h"
#include "kvtier/policy.h"
#include "policy/reuse_model.h"

namespace kvtier::internal {

// The 64-bit id the policies know a block by: a fold of its namespace and
// its 128-bit key. Two blocks of different namespaces get different ids.
uint64_t PolicyId(const NsKey& id);

// The α values a tuning tries after the one in use.
inline constexpr std::array<double, 5> kAlphaGrid = {0, 0.5, 1, 2, 4};

// One tier's α tuning: a copy of its window of recent requests, taken under
// the runtime lock and replayed without it.
struct AlphaTuning {
  size_t tier = 0;
  double current = 0;  // the α in use when the window was copied
  std::vector<std::shared_ptr<const TuneRequest>> window;  // oldest first
};

// The grid a tuning replays: `current` first, then kAlphaGrid without it, so
// that ties (TuneAlpha keeps the first) leave the α as it is.
std::vector<double> AlphaGridFrom(double current);
// The α that saves the most FLOPs over the tuning's window in a cache of
// `capacity_blocks` (TuneAlpha over AlphaGridFrom(current)). Pure.
double RunAlphaTuning(const AlphaTuning& tuning, uint64_t capacity_blocks);

class TierPolicies final : public IndexObserver {
 public:
  // Builds every tier's policies from options.tiers[t] (eviction, admission,
  // policy knobs). InvalidArgument names the tier when a policy refuses its
  // knobs.
  static Result<std::unique_ptr<TierPolicies>> Create(const RuntimeOptions& options);

  // A lookup's chain, root first, seen by every tier's admission before the
  // engine prefills the misses, and recorded in the α tuning window when a
  // flop_aware tier tunes. Returns true when a tuning has become due.
  bool ObserveRequest(NamespaceId ns, std::span<const BlockKey> keys, const RequestHints& hints,
                      uint64_t now_ns);
  // The request whose lookup chain was `keys` finished decoding with
  // `output_tokens` tokens (the engine knows it when the request ends, before
  // its blocks leave the hub); `reuse` admission and eviction learn from it
  // (Runtime::RequestFinished).
  void ObserveFinish(NamespaceId ns, std::span<const BlockKey> keys, uint32_t output_tokens,
                     uint64_t now_ns);
  // What tier `tier`'s policies know of `e` (its last use is the deepest
  // one for a tier that refreshes only the deepest hit). A part of a state
  // checkpoint has its own id, and its boundary block's depth, sightings
  // and hits.
  BlockMeta MetaOf(const IndexEntry& e, size_t tier) const;
  // MetaOf for an admission decision: a part of a state checkpoint is asked
  // about as the checkpoint of its boundary block, with the boundary's id
  // (marconi knows the block by it). Ids are not unique then: Choose uses
  // MetaOf.
  BlockMeta AdmissionMetaOf(const IndexEntry& e, size_t tier) const;
  // The boundary block of a part of a state checkpoint (its first ancestor
  // that is not a part; a part being admitted, `would` in RunSave, may hang
  // off it directly); null for a block that is not a part.
  static const IndexEntry* BoundaryOf(const IndexEntry& e);
  // Bit t: tier t refreshes recency on the deepest hit only (flop_aware),
  // for BlockIndex::set_deepest_only.
  uint32_t deepest_only_tiers() const;
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

  // α tuning of flop_aware tiers (policy.alpha_tune_every > 0). Every tier
  // whose alpha_tune_every requests have been seen since its last tuning,
  // with the last alpha_tune_window requests; restarts their counts.
  std::vector<AlphaTuning> TakeDueTunings();
  // Sets tier `tier`'s α, as a tuning chose it.
  void SetAlpha(size_t tier, double alpha);
  // The α tier `tier` uses; -1 unless it evicts by flop_aware.
  double alpha(size_t tier) const;
  // Tunings SetAlpha applied to tier `tier`.
  uint64_t alpha_tunings(size_t tier) const { return tiers_[tier].tunings; }

  // IndexObserver: keeps each tier's eviction policy in step with the index.
  void OnAdd(const IndexEntry& e, size_t tier) override;
  void OnDrop(const IndexEntry& e, size_t tier) noexcept override;
  void OnTouch(const IndexEntry& e, size_t tier) override;

 private:
  struct PerTier {
    AdmissionChain admission;
    std::unique_ptr<EvictionPolicy> eviction;
    bool lru = true;
    bool admits_all = true;
    double read_bytes_per_s = 0;
    double read_latency_s = 0;
    bool flop_aware = false;
    uint32_t tune_every = 0;  // 0: never tuned
    uint32_t tune_window = 0;
    uint64_t since_tune = 0;  // requests seen since the last tuning
    uint64_t tunings = 0;
  };
  TierPolicies(uint64_t block_bytes, uint32_t block_tokens, const ModelCost& cost,
               double gpu_flops_per_s)
      : block_bytes_(block_bytes),
        block_tokens_(block_tokens),
        cost_(cost),
        gpu_flops_per_s_(gpu_flops_per_s) {}
  // Appends the request to the tuning window; true when a tuning is due.
  bool RecordForTuning(std::span<const uint64_t> ids);
  // FLOPs a hit on the block at `depth` saves (0 without block_tokens).
  double FlopsAt(uint32_t depth) const;

  const uint64_t block_bytes_;
  const uint32_t block_tokens_;
  const ModelCost cost_;
  const double gpu_flops_per_s_;
  // The learners of every tier's `reuse` policies, fed once per request.
  SharedReuseModels reuse_models_;
  std::vector<PerTier> tiers_;
  std::vector<uint64_t> ids_;  // ObserveRequest scratch
  bool observes_ = false;      // some admission watches requests, or alpha is tuned
  // The recent requests, shared with tunings in flight; bounded by the
  // largest window of a tuning tier (0: nothing recorded).
  std::deque<std::shared_ptr<const TuneRequest>> window_;
  size_t window_limit_ = 0;
};

}  // namespace kvtier::internal
