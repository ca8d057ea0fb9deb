// Command-line wiring of `kvtier-bench sweep` (kept out of main.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kvtier::bench {

struct SweepFlags {
  std::string trace;
  std::vector<std::string> points = {"0.05:0.30", "0.10:0.50"};
  std::vector<std::string> policies = {"lru", "oracle", "frequency", "s3fifo", "marconi", "kvtier"};
  uint32_t gpu_pool_blocks = 2048;
  double gpu_tflops = 400;
  double decode_ms = 30;
  double watermark = 0;
  bool no_save_on_preempt = false;
  double write_budget_gib_per_day = 0;
  double write_budget_lru_share = 0;  // > 0: budget = share x LRU's NVMe bytes per modeled day
  uint32_t limit = 0;
  double probation = -1;  // marconi_probation override; negative = default
  // The "custom" policy set: host eviction, NVMe admission chain, NVMe eviction.
  std::string custom = "lru:always:lru";
  std::vector<std::string> knobs;       // NAME=VALUE overrides of PolicyKnobs
  bool hybrid = false;                  // also print the hybrid-model table per point
  double hybrid_kv_kib_per_token = 16;  // attention layers' KV per token
  double hybrid_state_mib = 32;         // one SSM state checkpoint
};

void AddSweepCommand(CLI::App& app, SweepFlags& flags);
// Runs the sweep and prints the tables; returns the process exit code.
int RunSweepCommand(const SweepFlags& flags);

}  // namespace kvtier::bench
