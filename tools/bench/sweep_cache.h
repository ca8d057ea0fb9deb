// Metadata-only tiered cache for `kvtier-bench sweep`: the host hub and one
// lower tier, with the product's admission and eviction policy objects, the
// leaf-first rule and per-tier byte accounting. No bytes move.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvtier/policy.h"
#include "policy/reuse_model.h"

namespace kvtier::bench {

inline constexpr size_t kSimTiers = 2;  // 0 = host, 1 = nvme

struct SimTierConfig {
  uint64_t capacity_blocks = 0;
  AdmissionChain admission;  // ignored for tier 0 (the hub admits all)
  std::unique_ptr<EvictionPolicy> eviction;
  bool oracle = false;  // Belady eviction and admission
  // Recency refreshed on the deepest hit of a use only, as the runtime does
  // for flop_aware tiers (BlockIndex::set_deepest_only).
  bool deepest_only = false;
  double read_bytes_per_s = 0;
  double read_latency_s = 0;
};

struct SimTierCounters {
  uint64_t bytes_written = 0;
  uint64_t blocks_written = 0;
  uint64_t forced_writes = 0;  // refused but written to keep a child reachable
  uint64_t rejected = 0;
  uint64_t evicted = 0;
};

// One block of a request as the cache is told about it.
struct SimBlock {
  uint64_t id = 0;
  uint32_t tokens = 0;
  double flops = 0;
  uint64_t next_use = UINT64_MAX;  // request index of its next use (oracle)
};

class TieredCache {
 public:
  // `reuse_models` (may be null): the learners the tiers' `reuse` policies
  // share (policy/policy_build.h); the cache feeds them every request.
  TieredCache(std::array<SimTierConfig, kSimTiers> tiers, uint64_t block_bytes,
              double gpu_flops_per_s, uint32_t evict_batch,
              std::unique_ptr<internal::SharedReuseModels> reuse_models = nullptr);

  // Leading blocks of `chain` stored in some tier; tier_of[i] = fastest tier.
  size_t Lookup(std::span<const SimBlock> chain, std::vector<uint8_t>* tier_of) const;
  // Records a use of the first `hits` blocks, deepest first (promoting
  // lower-tier hits into the hub), and saves the rest into the hub.
  void Use(std::span<const SimBlock> chain, size_t hits, uint64_t now_ns);
  const SimTierCounters& counters(size_t t) const { return counters_[t]; }
  uint64_t blocks_in(size_t t) const { return blocks_in_[t]; }
  EvictionPolicy* eviction(size_t t) { return tiers_[t].eviction.get(); }
  // The lower tier's chain also observes every request before its prefill.
  AdmissionChain& admission(size_t t) { return tiers_[t].admission; }
  // Every request before its prefill, and its finish (output length) once
  // decoding ends: to the lower tier's admission and every tier's eviction.
  void ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks,
                      const RequestHints& hints, uint64_t now_ns);
  void ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens, uint64_t now_ns);

 private:
  struct Entry {
    BlockMeta meta;
    uint64_t deepest_use_ns = 0;  // the last use that ended here
    uint64_t parent = 0;
    bool has_parent = false;
    uint8_t locations = 0;
    uint32_t children = 0;
    std::array<uint32_t, kSimTiers> children_in{};
    bool In(size_t t) const { return (locations >> t) & 1U; }
  };

  void AddLocation(Entry& e, size_t t, uint64_t now_ns);
  void DropLocation(Entry& e, size_t t);
  void MakeRoom(size_t t, uint64_t now_ns);
  void Demote(Entry& e, uint64_t now_ns);
  bool Admit(size_t t, Entry& e, uint64_t now_ns);
  void EraseIfHomeless(uint64_t id);
  std::vector<BlockMeta> Candidates(size_t t) const;
  // What tier `t`'s policies know of `e`.
  BlockMeta MetaFor(const Entry& e, size_t t) const;

  std::unique_ptr<internal::SharedReuseModels> reuse_models_;
  std::array<SimTierConfig, kSimTiers> tiers_;
  uint64_t block_bytes_;
  double gpu_flops_per_s_;
  uint32_t evict_batch_;
  std::unordered_map<uint64_t, Entry> map_;
  std::array<std::unordered_set<uint64_t>, kSimTiers> leaves_;
  std::array<uint64_t, kSimTiers> blocks_in_{};
  std::array<SimTierCounters, kSimTiers> counters_{};
  std::array<uint64_t, kSimTiers> farthest_{};  // oracle: farthest next use seen
  std::unordered_set<uint64_t> busy_;           // blocks of the request in hand
};

}  // namespace kvtier::bench
