#include "tools/bench/sweep_cli.h"

#include <cstdio>
#include <iostream>

#include "tools/bench/cli_checks.h"
#include "tools/bench/sweep.h"
#include "tools/bench/sweep_hybrid.h"
#include "tools/bench/sweep_point.h"

namespace kvtier::bench {

void AddSweepCommand(CLI::App& app, SweepFlags& f) {
  CLI::App* cmd =
      app.add_subcommand("sweep", "metadata-only policy simulation over a trace and capacities");
  cmd->add_option("--trace", f.trace, "Mooncake JSONL trace")->required();
  cmd->add_option("--points", f.points,
                  "capacity points host:nvme as fractions of the trace's unique blocks")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--policies", f.policies,
                  "policy sets: lru, oracle, frequency, s3fifo, slru, cost, write_budget, "
                  "flop_aware, marconi, kvtier, custom (see --custom)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--gpu-pool-blocks", f.gpu_pool_blocks, "engine KV pool in blocks")
      ->check(kUnsigned32)
      ->capture_default_str();
  cmd->add_option("--gpu-tflops", f.gpu_tflops, "achieved prefill TFLOP/s")->capture_default_str();
  cmd->add_option("--decode-ms", f.decode_ms, "one decode step, ms")->capture_default_str();
  cmd->add_option("--watermark", f.watermark, "GPU watermark (fraction kept free); 0 = off")
      ->capture_default_str();
  cmd->add_flag("--no-save-on-preempt", f.no_save_on_preempt,
                "preempted requests recompute their generated tokens");
  cmd->add_option("--write-budget-gib-per-day", f.write_budget_gib_per_day,
                  "write_budget admission: NVMe budget (or --write-budget-lru-share)")
      ->capture_default_str();
  cmd->add_option("--write-budget-lru-share", f.write_budget_lru_share,
                  "write_budget admission: budget = this share of admit-all+LRU's NVMe bytes per "
                  "modeled day at the same point (needs lru in --policies, anywhere; the lru row "
                  "runs first; not with --write-budget-gib-per-day)");
  cmd->add_option("--limit", f.limit, "first N requests only (0 = all)")->check(kUnsigned32);
  cmd->add_option("--probation", f.probation,
                  "marconi: share of once-seen blocks admitted, 0 to 1 (default: the "
                  "marconi_probation knob's)");
  cmd->add_option(
         "--custom", f.custom,
         "the 'custom' policy set: HOST_EVICTION:NVME_ADMISSION[+ADMISSION...]:NVME_EVICTION")
      ->capture_default_str();
  cmd->add_option(
      "--knob", f.knobs,
      "NAME=VALUE: override a policy knob (marconi_probation, reuse_ratio, reuse_spread, "
      "reuse_fill_share, reuse_min_samples, reuse_half_life, reuse_age_exponent, "
      "slru_protected_fraction, s3fifo_small_fraction, flop_alpha, cost_margin)");
  cmd->add_flag("--hybrid", f.hybrid,
                "also compare state-checkpoint placements of a hybrid (attention + SSM) model "
                "in one tier of (host + nvme fraction) x unique blocks x KV block bytes");
  cmd->add_option("--hybrid-kv-kib-per-token", f.hybrid_kv_kib_per_token,
                  "hybrid model: KV KiB per token of its attention layers")
      ->capture_default_str();
  cmd->add_option("--hybrid-state-mib", f.hybrid_state_mib,
                  "hybrid model: MiB of one state checkpoint")
      ->capture_default_str();
}

namespace {

int PrintHybrid(const SweepFlags& f, const Trace& trace, uint64_t unique, double fraction,
                const PolicyKnobs& knobs) {
  HybridModel m;
  m.kv_bytes_per_block = static_cast<uint64_t>(f.hybrid_kv_kib_per_token * 1024.0) * m.block_tokens;
  m.state_bytes = static_cast<uint64_t>(f.hybrid_state_mib * 1048576.0);
  const auto capacity = BlocksAt(fraction, unique) * m.kv_bytes_per_block;
  std::vector<HybridResult> rows;
  for (CheckpointPlacement p : {CheckpointPlacement::kEveryBlock, CheckpointPlacement::kMarconi}) {
    Result<HybridResult> r = RunHybridSweep(trace, m, p, capacity, knobs);
    if (!r.ok()) {
      std::cerr << "kvtier-bench sweep: hybrid: " << r.status().ToString() << "\n";
      return 2;
    }
    rows.push_back(std::move(*r));
  }
  std::printf(
      "hybrid model (%.0f KiB KV per token, %.0f MiB state checkpoint), one tier of "
      "%.0f%% of unique blocks' KV\n\n%s\n",
      f.hybrid_kv_kib_per_token, f.hybrid_state_mib, 100 * fraction,
      FormatHybridTable(rows).c_str());
  return 0;
}

// One capacity point: every policy set's row, then the hybrid table.
int RunPoint(const SweepFlags& f, const Trace& trace, const SweepEngine& engine,
             const PolicyKnobs& knobs, uint64_t unique, const std::string& point) {
  Result<SweepCapacity> cap = SweepCapacityAt(point, unique);
  if (!cap.ok()) {
    std::cerr << "kvtier-bench sweep: " << cap.status().message() << "\n";
    return 2;
  }
  const SweepRowDone progress = [&](const std::string& name, double seconds) {
    std::fprintf(stderr, "%s @ %s: %.1f s\n", name.c_str(), point.c_str(), seconds);
  };
  Result<std::vector<SweepResult>> rows = RunSweepPoint(trace, engine, f, *cap, knobs, progress);
  if (!rows.ok()) {
    std::cerr << "kvtier-bench sweep: " << rows.status().message() << "\n";
    return 2;
  }
  const SweepPoint p = *ParseSweepPoint(point);  // SweepCapacityAt parsed it
  std::printf("host %.0f%% / nvme %.0f%% of unique blocks\n\n%s\n", 100 * p.host, 100 * p.nvme,
              FormatSweepTable(*rows, engine.BlockBytes()).c_str());
  if (f.hybrid && PrintHybrid(f, trace, unique, p.host + p.nvme, knobs) != 0) return 2;
  return 0;
}

}  // namespace

int RunSweepCommand(const SweepFlags& f) {
  // The flags first: a bad one is reported before the trace is read.
  if (Status s = ValidateSweepFlags(f); !s.ok()) {
    std::cerr << "kvtier-bench sweep: " << s.message() << "\n";
    return 2;
  }
  Result<Trace> trace = ReadMooncakeTrace(f.trace);
  if (!trace.ok()) {
    std::cerr << "kvtier-bench sweep: " << trace.status().ToString() << "\n";
    return 2;
  }
  if (f.limit != 0 && trace->requests.size() > f.limit) trace->requests.resize(f.limit);
  if (trace->requests.empty()) {
    std::cerr << "kvtier-bench sweep: trace " << f.trace << " has no requests\n";
    return 2;
  }
  SweepEngine engine;  // llama3-8b-like geometry, 512-token blocks
  engine.gpu_pool_blocks = f.gpu_pool_blocks;
  engine.gpu_flops_per_s = f.gpu_tflops * 1e12;
  engine.decode_step_s = f.decode_ms / 1000.0;
  engine.gpu_watermark = f.watermark;
  engine.save_on_preempt = !f.no_save_on_preempt;
  const LeftOut left_out = DropRequestsLargerThanPool(*trace, engine);
  if (trace->requests.empty()) {
    std::cerr << "kvtier-bench sweep: no request of " << f.trace << " fits --gpu-pool-blocks "
              << f.gpu_pool_blocks << " at its longest (prompt and output)\n";
    return 2;
  }
  Result<PolicyKnobs> knobs = SweepKnobs(f);
  if (!knobs.ok()) {
    std::cerr << "kvtier-bench sweep: " << knobs.status().message() << "\n";
    return 2;
  }
  const uint64_t unique = UniqueBlocks(*trace);
  std::printf("trace %s: %zu requests, %llu unique blocks of %u tokens, %.0f MiB each\n",
              f.trace.c_str(), trace->requests.size(), (unsigned long long)unique,
              engine.block_tokens, double(engine.BlockBytes()) / 1048576.0);
  if (left_out.requests > 0) {
    std::printf(
        "left out: %llu requests (%llu prompt blocks) larger than the GPU pool at their "
        "longest\n",
        (unsigned long long)left_out.requests, (unsigned long long)left_out.blocks);
  }
  std::printf(
      "engine: %.0f TFLOP/s prefill, %u GPU blocks, %.0f ms decode step, watermark %g, "
      "host %.0f GB/s, nvme %.0f GB/s\n\n",
      f.gpu_tflops, f.gpu_pool_blocks, f.decode_ms, f.watermark, engine.host_read_bytes_per_s / 1e9,
      engine.nvme_read_bytes_per_s / 1e9);
  // Every point holds a hub block, or none runs: a late point must not fail
  // after the earlier ones took minutes.
  for (const std::string& point : f.points) {
    if (Result<SweepCapacity> cap = SweepCapacityAt(point, unique); !cap.ok()) {
      std::cerr << "kvtier-bench sweep: " << cap.status().message() << "\n";
      return 2;
    }
  }
  for (const std::string& point : f.points) {
    if (RunPoint(f, *trace, engine, *knobs, unique, point) != 0) return 2;
  }
  return 0;
}

}  // namespace kvtier::bench
