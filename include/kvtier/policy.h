// Cache policies: what a tier admits, what it evicts first, and when the
// engine should hold back or preempt requests. Policies are pure: no I/O, no
// threads, time comes in as arguments. The runtime's mover and the
// `kvtier-bench sweep` simulator drive the very same objects.
//
// Every block is named by a 64-bit id (a fold of its BlockKey); a request is
// the chain of ids of its blocks, root first. Not thread-safe: the caller
// serialises calls on one policy object.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/status.h"

namespace kvtier {

// Prefill cost of a dense transformer (FLOPs of a prefix of L tokens, per
// layer: attention 8·L·D² + 4·L²·D, MLP 16·L·D²) and of hybrid state.
struct KVTIER_EXPORT ModelCost {
  uint32_t layers = 32;
  uint32_t hidden = 4096;
  uint64_t kv_bytes_per_token = 131072;  // all layers, K and V
  uint64_t state_bytes = 0;              // hybrid: bytes of one state checkpoint

  double PrefixFlops(uint64_t tokens) const;
  // Marginal FLOPs of tokens [begin, end): what a hit on them saves.
  double SpanFlops(uint64_t begin, uint64_t end) const {
    return PrefixFlops(end) - PrefixFlops(begin);
  }
};

// What a policy may know about one block. The caller fills what it knows.
struct BlockMeta {
  uint64_t id = 0;
  uint32_t depth = 0;      // position in its chain, root = 0
  uint32_t tokens = 0;     // tokens the block covers
  uint64_t bytes = 0;      // bytes one copy takes in a tier
  uint32_t sightings = 0;  // requests that named it so far
  uint32_t hits = 0;       // requests that found it stored
  uint64_t last_use_ns = 0;
  uint64_t inserted_ns = 0;
  double flops = 0;                // prefill FLOPs a hit on this block saves; 0 = unknown
  uint64_t session_id = 0;         // Save hint; 0 = unknown
  float expected_reuse = -1.0f;    // Save hint in [0, 1]; negative = none
  bool is_tail = false;            // last full block of the request that saved it
  bool is_checkpoint = false;      // hybrid state checkpoint, not a KV block
  uint64_t next_use = UINT64_MAX;  // oracle only: next request index naming it
  bool backed = false;  // eviction only: a slower tier holds a copy too, so dropping this
                        // one costs no write and keeps the hit (read from that tier)
};

// The tier being asked, as the admission policy sees it.
struct TierState {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  double read_bytes_per_s = 0;  // 0 = unknown (cost admission then admits)
  double read_latency_s = 0;
  double gpu_flops_per_s = 0;  // engine's prefill rate, for cost admission
  uint64_t now_ns = 0;
};

// Hints an engine may pass with a request (Save or lookup).
struct RequestHints {
  uint64_t session_id = 0;       // 0 = none
  float expected_reuse = -1.0f;  // probability the request's tail is reused
};

// Decides whether a block is written into a tier. Policies compose: a tier
// admits a block only if every one of its policies does.
class KVTIER_EXPORT AdmissionPolicy {
 public:
  virtual ~AdmissionPolicy() = default;
  virtual std::string_view Name() const = 0;
  // Sees every request's chain before its prefill (sightings, radix tree).
  virtual void ObserveRequest(std::span<const uint64_t> /*chain*/, uint32_t /*full_blocks*/,
                              const RequestHints& /*hints*/, uint64_t /*now_ns*/) {}
  // The request whose chain is `chain` (as given to ObserveRequest) has
  // finished decoding with `output_tokens` tokens. An engine knows this when
  // the request ends, before its blocks leave the host; `reuse` learns from it.
  virtual void ObserveFinish(std::span<const uint64_t> /*chain*/, uint32_t /*output_tokens*/,
                             uint64_t /*now_ns*/) {}
  virtual bool Admit(const BlockMeta& block, const TierState& tier) = 0;
  // Bytes actually written into the tier after an admit.
  virtual void OnWritten(uint64_t /*bytes*/, uint64_t /*now_ns*/) {}
  // True for a policy that rations what it admits (write_budget): an
  // AdmissionChain asks it after the others, and only for blocks they all
  // admit, so that it paces the blocks that would really be written.
  virtual bool Rations() const { return false; }
};

// Orders eviction candidates. The caller offers only candidates it may drop
// (leaves: no child stored below them in the tier), so leaf-first and
// children-before-parents hold whatever the policy.
class KVTIER_EXPORT EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view Name() const = 0;
  virtual void OnInsert(const BlockMeta& /*block*/) {}
  virtual void OnAccess(const BlockMeta& /*block*/) {}
  virtual void OnRemove(uint64_t /*id*/) {}
  // Request observations, as AdmissionPolicy's (only `reuse` uses them).
  virtual void ObserveRequest(std::span<const uint64_t> /*chain*/, uint32_t /*full_blocks*/,
                              const RequestHints& /*hints*/, uint64_t /*now_ns*/) {}
  virtual void ObserveFinish(std::span<const uint64_t> /*chain*/, uint32_t /*output_tokens*/,
                             uint64_t /*now_ns*/) {}
  // Reorders `candidates` so that the first is evicted first. Ties keep the
  // caller's order (stable). May update the policy's own state.
  virtual void Order(std::span<BlockMeta> candidates, uint64_t now_ns) = 0;
  // flop_aware only: the recency/FLOPs balance; others ignore it.
  virtual void SetAlpha(double /*alpha*/) {}
  virtual double alpha() const { return 0; }
};

// Knobs of every policy; each policy reads its own. Defaults are the
// sweep's winning set (docs/BENCHMARKS.md).
struct KVTIER_EXPORT PolicyKnobs {
  uint32_t frequency_threshold = 2;         // frequency: admit on the N-th sighting
  uint32_t sketch_width = 1 << 16;          // frequency: counters per sketch row, <= 1 << 24
  uint64_t sketch_aging_period = 0;         // frequency: halve counts after this many sightings;
                                            //   0 = SketchAgingLimit(), also the most allowed
  bool marconi_admit_tails = true;          // marconi: admit tails of continuing sessions
  float marconi_continue_threshold = 0.5;   // marconi: expected_reuse at which a tail is kept
  double marconi_probation = 0.35;          // marconi: share of once-seen KV blocks admitted
  bool marconi_checkpoints_only = false;    // marconi: admit every KV block, judge only state
                                            //   checkpoints (hybrid models: KV admitted as by
                                            //   `always`, checkpoints at branch points / tails)
  uint64_t write_budget_bytes_per_day = 0;  // write_budget: device bytes per day (required > 0)
  double write_amplification = 1.0;         // write_budget: device WA, >= 1: the host may
                                            //   write budget / WA (and max / WA) bytes
  uint64_t write_max_bytes_per_s = 0;       // write_budget: hard cap, device bytes/s; 0 = none
  uint64_t write_interval_ms = 1000;        // write_budget: probability update period,
                                            //   1 to kMaxWriteIntervalMs
  double cost_margin = 1.0;                 // cost: admit if load_time * margin < recompute
  double flop_alpha = 1.0;                  // flop_aware: initial alpha
  uint32_t alpha_tune_every = 256;          // flop_aware: requests between tunings, 0 = never
  uint32_t alpha_tune_window = 512;         // flop_aware: requests replayed per tuning,
                                            //   1 to kMaxAlphaTuneWindow (the runtime keeps
                                            //   that many requests' chains)
  double s3fifo_small_fraction = 0.1;       // s3fifo: share of the small FIFO
  double slru_protected_fraction = 0.8;     // slru: share of a tier blocks seen twice may hold
  double reuse_ratio = 0.7;                 // reuse: admit a class whose learned reuse rate is
                                            //   >= ratio x the average of first-seen blocks
                                            //   (>= 1 x once the tier is 95 % full)
  double reuse_spread = 0;                  // reuse: 0 = hard cut; else admit probability ramps
                                            //   from 0 to 1 over ratio -/+ spread (per request)
  double reuse_fill_share = 0;              // reuse: admit every full block while the tier is
                                            //   below this share of its capacity (0 = off)
  uint32_t reuse_min_samples = 256;         // reuse: matured blocks a class needs to be judged,
                                            //   >= 1
  uint64_t reuse_half_life = 1 << 18;       // reuse: class counts halve every N block sightings
  double reuse_age_exponent = 0.5;          // reuse eviction: priority = rate / idle^exponent
                                            //   (1 = hyperbolic; lower trusts the class more)

  static constexpr uint64_t kMaxWriteIntervalMs = 24ULL * 3600 * 1000;  // once a day at least
  static constexpr uint32_t kMaxAlphaTuneWindow = 1u << 16;
  static constexpr double kMaxFlopAlpha = 1e12;

  // The longest sketch_aging_period the frequency sketch keeps meaning at:
  // effective width x frequency_threshold / 4 sightings. Between halvings an
  // average counter then reaches at most half the threshold, so an id never
  // seen passes only when all four of its counters collide well above the
  // average (under 1 % at the defaults). A longer period lets the counters
  // fill until every id passes.
  uint64_t SketchAgingLimit() const;
  // sketch_aging_period, with 0 meaning SketchAgingLimit().
  uint64_t SketchAgingPeriod() const {
    return sketch_aging_period == 0 ? SketchAgingLimit() : sketch_aging_period;
  }

  // Ranges every knob must meet, whichever policies a tier names.
  Status Validate() const;
  // Validate, plus the limits of the admission policies named: with
  // "frequency", a sketch_aging_period no longer than SketchAgingLimit()
  // (a tier that does not count sightings may keep any period).
  Status ValidateFor(std::span<const std::string> admission) const;
};

// Builds one admission policy by name ("always", "frequency", "marconi",
// "write_budget", "cost", "reuse"). `seed` makes write_budget's coin reproducible.
KVTIER_EXPORT Result<std::unique_ptr<AdmissionPolicy>> CreateAdmissionPolicy(
    std::string_view name, const PolicyKnobs& knobs, uint64_t seed = 0);
// Builds one eviction policy by name ("lru", "s3fifo", "flop_aware", "slru",
// "reuse": learned reuse rate / time since last use, lowest first).
KVTIER_EXPORT Result<std::unique_ptr<EvictionPolicy>> CreateEvictionPolicy(
    std::string_view name, const PolicyKnobs& knobs);

// All policies of one tier: admits iff every one admits; observations go to
// all of them. Every policy that does not ration is asked about every block;
// those that ration (AdmissionPolicy::Rations) come after them, in the order
// added, and are asked only while every policy before them has admitted.
class KVTIER_EXPORT AdmissionChain {
 public:
  AdmissionChain() = default;
  static Result<AdmissionChain> Create(std::span<const std::string> names, const PolicyKnobs& knobs,
                                       uint64_t seed = 0);
  void Add(std::unique_ptr<AdmissionPolicy> p);
  void ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks,
                      const RequestHints& hints, uint64_t now_ns);
  void ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens, uint64_t now_ns);
  bool Admit(const BlockMeta& block, const TierState& tier);
  void OnWritten(uint64_t bytes, uint64_t now_ns);
  bool empty() const { return policies_.empty(); }

 private:
  std::vector<std::unique_ptr<AdmissionPolicy>> policies_;
};

// One request of a replay window for α tuning: its chain and per-block meta
// (id, bytes, flops at least).
struct TuneRequest {
  std::vector<BlockMeta> blocks;
};

// Replays `window` against one leaf-first cache of `capacity_blocks` with
// flop_aware at each α of `grid`; returns the α that saved the most FLOPs
// (the first one on ties). Pure; run it off the critical path.
KVTIER_EXPORT double TuneAlpha(std::span<const TuneRequest> window, uint64_t capacity_blocks,
                               std::span<const double> grid);
// FLOPs saved by that replay at one α (exposed for tests and reports).
KVTIER_EXPORT double ReplayFlopsSaved(std::span<const TuneRequest> window, uint64_t capacity_blocks,
                                      double alpha);

// GPU KV watermark (vLLM's --watermark idea) and preemption victims.
struct RunningRequest {
  uint64_t request_id = 0;
  uint32_t blocks_held = 0;    // GPU blocks it frees when preempted
  uint64_t tokens = 0;         // tokens whose KV it holds
  uint64_t saved_tokens = 0;   // of those, already saved below the GPU
  double restore_load_s = 0;   // time to load the saved part back
  double recompute_flops = 0;  // FLOPs to recompute the unsaved part
};

struct PreemptionProposal {
  uint64_t request_id = 0;
  uint32_t blocks_freed = 0;
  double restore_cost_s = 0;  // modeled time to resume it
};

class KVTIER_EXPORT GpuWatermark {
 public:
  // `watermark`: fraction of the pool kept free for running requests to grow,
  // clamped to [0, 1] (NaN = 0). A `gpu_flops_per_s` that is not a positive
  // finite rate leaves recompute out of the restore cost.
  explicit GpuWatermark(double watermark = 0.01, double gpu_flops_per_s = 4e14);
  void Report(uint32_t free_blocks, uint32_t total_blocks) {
    free_ = free_blocks;
    total_ = total_blocks;
  }
  // Blocks the watermark keeps free in a pool of `total_blocks`: the
  // watermark's share rounded up, except that a share within floating-point
  // error of a whole number is that number (0.07 of 100 is 7, not 8).
  uint64_t KeepBlocks(uint32_t total_blocks) const;
  // True when a new request needing `blocks_needed` leaves at least
  // KeepBlocks of the last reported pool free.
  bool ShouldAdmit(uint32_t blocks_needed) const;
  // Victims, cheapest to restore first, until `blocks_needed` are freed
  // (all of `running` if that is not enough). A request whose cost is not a
  // number (NaN inputs) counts as the dearest.
  std::vector<PreemptionProposal> Propose(std::span<const RunningRequest> running,
                                          uint32_t blocks_needed) const;
  double watermark() const { return watermark_; }

 private:
  double watermark_;
  double gpu_flops_per_s_;
  uint32_t free_ = 0;
  uint32_t total_ = 0;
};

// Names CreateAdmissionPolicy / CreateEvictionPolicy accept.
KVTIER_EXPORT std::span<const std::string_view> PolicyAdmissionNames();
KVTIER_EXPORT std::span<const std::string_view> PolicyEvictionNames();

}  // namespace kvtier
