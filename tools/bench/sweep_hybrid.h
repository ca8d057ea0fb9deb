// Hybrid-model cache model of `kvtier-bench sweep --hybrid`: a model with
// attention layers (KV blocks) and recurrent layers (SSM state) can resume
// from a prefix only where a state checkpoint of that exact boundary is
// stored (DESIGN.md: a hit without its state is a miss at that depth). One
// byte-sized tier, LRU, leaf-first for KV blocks; a checkpoint lives on the
// block whose end it marks and leaves with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/policy.h"
#include "kvtier/status.h"
#include "tools/bench/trace.h"

namespace kvtier::bench {

// Where state checkpoints are taken.
enum class CheckpointPlacement {
  kEveryBlock,  // at every full block boundary
  kMarconi,     // where marconi admission accepts one: branch points and tails
};

struct HybridModel {
  uint64_t kv_bytes_per_block = 8ULL << 20;  // attention layers only
  uint64_t state_bytes = 32ULL << 20;        // one checkpoint of all SSM layers
  uint32_t block_tokens = kMooncakeBlockTokens;
};

struct HybridResult {
  std::string label;
  uint64_t capacity_bytes = 0;
  uint64_t tokens = 0;
  uint64_t hit_tokens = 0;
  uint64_t kv_bytes_written = 0;
  uint64_t state_bytes_written = 0;
  uint64_t checkpoints_written = 0;
  double HitRate() const { return tokens == 0 ? 0 : double(hit_tokens) / double(tokens); }
};

// Replays `trace` in arrival order against one tier of `capacity_bytes`.
Result<HybridResult> RunHybridSweep(const Trace& trace, const HybridModel& model,
                                    CheckpointPlacement placement, uint64_t capacity_bytes,
                                    const PolicyKnobs& knobs);

std::string FormatHybridTable(const std::vector<HybridResult>& rows);

}  // namespace kvtier::bench
