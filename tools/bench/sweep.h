// `kvtier-bench sweep`: a metadata-only simulation of an engine with a
// tiered KV cache, over a trace and a grid of capacities and policy sets.
// The cache runs the product's policy objects (include/kvtier/policy.h);
// only the bytes are left out, so realistic capacities run in seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/policy.h"
#include "kvtier/status.h"
#include "tools/bench/trace.h"

namespace kvtier::bench {

// The engine model.
struct SweepEngine {
  ModelCost model;  // FLOPs and KV bytes per token
  uint32_t block_tokens = kMooncakeBlockTokens;
  double gpu_flops_per_s = 4e14;    // achieved prefill FLOP/s
  uint32_t gpu_pool_blocks = 2048;  // engine KV pool, in blocks
  double decode_step_s = 0.03;      // one decode step (one token per running request)
  double gpu_watermark = 0;         // fraction kept free at admission; 0 = off
  bool save_on_preempt = true;      // a victim's blocks are saved before it is freed
  double host_read_bytes_per_s = 25e9;
  double host_read_latency_s = 10e-6;
  double nvme_read_bytes_per_s = 7e9;
  double nvme_read_latency_s = 100e-6;
  uint32_t evict_batch = 16;  // blocks per eviction pass (watermark gap)
  uint64_t BlockBytes() const { return model.kv_bytes_per_token * block_tokens; }
};

// One policy combination. `oracle` replaces both tiers' policies by Belady.
struct SweepPolicy {
  std::string label;
  std::string host_eviction = "lru";
  std::vector<std::string> nvme_admission = {"always"};
  std::string nvme_eviction = "lru";
  bool oracle = false;
  bool tune_alpha = false;  // periodic α tuning of flop_aware tiers
};

struct SweepCapacity {
  uint64_t host_blocks = 0;
  uint64_t nvme_blocks = 0;
};

struct SweepResult {
  std::string label;
  SweepCapacity capacity;
  uint64_t requests = 0;
  uint64_t tokens = 0;  // prompt tokens of first prefills
  uint64_t hit_tokens_host = 0;
  uint64_t hit_tokens_nvme = 0;
  double flops_total = 0;  // prefill FLOPs with no cache
  double flops_saved = 0;
  uint64_t bytes_written_host = 0;
  uint64_t bytes_written_nvme = 0;
  uint64_t nvme_forced_writes = 0;
  uint64_t preemptions = 0;
  uint64_t recomputed_tokens = 0;  // tokens computed again after a preemption
  double ttft_p50_s = 0;
  double ttft_p99_s = 0;
  double final_alpha = 0;
  double sim_seconds = 0;  // modeled time from the trace start to the last finish
  double HitRate() const {
    return tokens == 0 ? 0 : double(hit_tokens_host + hit_tokens_nvme) / double(tokens);
  }
};

// Runs `trace` through the engine model with one policy set. Every request
// must fit the GPU pool at its longest (DropRequestsLargerThanPool).
Result<SweepResult> RunSweepOne(const Trace& trace, const SweepEngine& engine,
                                const SweepPolicy& policy, const SweepCapacity& capacity,
                                const PolicyKnobs& knobs);

// GPU pool blocks a request holds at its longest: its prompt and every
// output token but the last, plus the block the next token goes into.
uint64_t PeakPoolBlocks(const TraceRequest& request, uint32_t block_tokens);

// Leaves out the requests that do not fit the GPU pool at their longest, as
// `replay` leaves out prompts larger than its pool: an engine cannot run them
// to their end (each would preempt itself at every decode step).
struct LeftOut {
  uint64_t requests = 0;
  uint64_t blocks = 0;  // their prompts' blocks
};
LeftOut DropRequestsLargerThanPool(Trace& trace, const SweepEngine& engine);

// Named policy sets: "lru" (admit-all + LRU), "oracle", "frequency",
// "s3fifo", "slru", "marconi", "cost", "write_budget", "flop_aware", "kvtier"
// (the default set: learned reuse admission, reuse eviction on both tiers).
Result<SweepPolicy> NamedSweepPolicy(const std::string& name);

// A set spelled HOST_EVICTION:ADMISSION[+ADMISSION...]:NVME_EVICTION, e.g.
// "slru:marconi+write_budget:slru".
Result<SweepPolicy> CustomSweepPolicy(const std::string& spec);

// Markdown table: one row per result.
std::string FormatSweepTable(const std::vector<SweepResult>& rows, uint64_t block_bytes);

// Unique block ids of a trace (capacities are given as fractions of it).
uint64_t UniqueBlocks(const Trace& trace);

}  // namespace kvtier::bench
