// The flags of `kvtier-bench sweep` and their checks, apart from the CLI
// wiring (sweep_cli.h) so that tests reach them. Every number is checked to
// be finite and in range before the trace is read: a bad flag is an error,
// never a cast of NaN or infinity into a capacity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/policy.h"
#include "kvtier/status.h"

namespace kvtier::bench {

struct SweepFlags {
  std::string trace;
  std::vector<std::string> points = {"0.05:0.30", "0.10:0.50"};
  std::vector<std::string> policies = {"lru", "oracle", "frequency", "s3fifo", "marconi", "kvtier"};
  uint32_t gpu_pool_blocks = 2048;  // >= 1
  double gpu_tflops = 400;          // > 0
  double decode_ms = 30;            // >= 0
  double watermark = 0;             // [0, 1); 0 = off
  bool no_save_on_preempt = false;
  double write_budget_gib_per_day = 0;  // [0, 10^9]; 0 = unset
  double write_budget_lru_share = 0;    // > 0: budget = share x lru's NVMe bytes per modeled day
  uint32_t limit = 0;
  std::optional<double> probation;  // marconi_probation override in [0, 1]
  // The "custom" policy set: host eviction, NVMe admission chain, NVMe eviction.
  std::string custom = "lru:always:lru";
  std::vector<std::string> knobs;       // NAME=VALUE overrides of PolicyKnobs
  bool hybrid = false;                  // also print the hybrid-model table per point
  double hybrid_kv_kib_per_token = 16;  // attention layers' KV per token, (0, 2^20]
  double hybrid_state_mib = 32;         // one SSM state checkpoint, (0, 2^20]
};

// One --points entry: capacities as fractions of the trace's unique blocks.
struct SweepPoint {
  double host = 0;  // (0, 1]
  double nvme = 0;  // [0, 1]
};

// "HOST:NVME", e.g. "0.05:0.30"; InvalidArgument naming the point otherwise.
Result<SweepPoint> ParseSweepPoint(std::string_view text);

// The blocks a capacity `fraction` of `unique` blocks stands for, rounded
// down, but not below a whole number that the product misses only by
// floating-point error (0.29 x 100 is 29, not 28).
uint64_t BlocksAt(double fraction, uint64_t unique);

// Applies one "NAME=NUMBER" --knob to `knobs`. The number must be finite and
// nothing may follow it; whole-number knobs take whole numbers in range.
// Ranges of the other knobs are PolicyKnobs::Validate's.
Status ApplySweepKnob(std::string_view spec, PolicyKnobs* knobs);

// The policy knobs the flags give: write budget, probation, then --knob in
// order; InvalidArgument when a flag or the result is out of range.
Result<PolicyKnobs> SweepKnobs(const SweepFlags& flags);

// Every flag but the trace file: engine numbers, points, the policy names
// and --custom's policies, knobs, the hybrid model, and the write budget: one
// of --write-budget-gib-per-day and --write-budget-lru-share when a policy
// set admits with write_budget, never both, and the share only with lru in
// --policies. A flag that only a row not asked for would read (a budget, a
// probation, the hybrid model without --hybrid) is refused, not ignored.
Status ValidateSweepFlags(const SweepFlags& flags);

}  // namespace kvtier::bench
