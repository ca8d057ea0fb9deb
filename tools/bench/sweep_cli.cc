#include "tools/bench/sweep_cli.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "tools/bench/sweep.h"

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
                  "policy sets: lru, oracle, frequency, s3fifo, cost, write_budget, flop_aware, "
                  "marconi, kvtier")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--gpu-pool-blocks", f.gpu_pool_blocks, "engine KV pool in blocks")
      ->capture_default_str();
  cmd->add_option("--gpu-tflops", f.gpu_tflops, "achieved prefill TFLOP/s")->capture_default_str();
  cmd->add_option("--decode-ms", f.decode_ms, "one decode step, ms")->capture_default_str();
  cmd->add_option("--watermark", f.watermark, "GPU watermark (fraction kept free); 0 = off")
      ->capture_default_str();
  cmd->add_flag("--no-save-on-preempt", f.no_save_on_preempt,
                "preempted requests recompute their generated tokens");
  cmd->add_option("--write-budget-gib-per-day", f.write_budget_gib_per_day,
                  "write_budget policy: NVMe budget")
      ->capture_default_str();
  cmd->add_option("--limit", f.limit, "first N requests only (0 = all)");
  cmd->add_option("--probation", f.probation, "marconi: share of once-seen blocks admitted");
}

int RunSweepCommand(const SweepFlags& f) {
  Result<Trace> trace = ReadMooncakeTrace(f.trace);
  if (!trace.ok()) {
    std::cerr << "kvtier-bench sweep: " << trace.status().ToString() << "\n";
    return 2;
  }
  if (f.limit != 0 && trace->requests.size() > f.limit) trace->requests.resize(f.limit);
  SweepEngine engine;  // llama3-8b-like geometry, 512-token blocks
  engine.gpu_pool_blocks = f.gpu_pool_blocks;
  engine.gpu_flops_per_s = f.gpu_tflops * 1e12;
  engine.decode_step_s = f.decode_ms / 1000.0;
  engine.gpu_watermark = f.watermark;
  engine.save_on_preempt = !f.no_save_on_preempt;
  PolicyKnobs knobs;
  knobs.write_budget_bytes_per_day =
      static_cast<uint64_t>(f.write_budget_gib_per_day * 1024.0 * 1024.0 * 1024.0);
  if (f.probation >= 0) knobs.marconi_probation = f.probation;
  const uint64_t unique = UniqueBlocks(*trace);
  std::printf("trace %s: %zu requests, %llu unique blocks of %u tokens, %.0f MiB each\n",
              f.trace.c_str(), trace->requests.size(), (unsigned long long)unique,
              engine.block_tokens, double(engine.BlockBytes()) / 1048576.0);
  std::printf(
      "engine: %.0f TFLOP/s prefill, %u GPU blocks, %.0f ms decode step, watermark %g, "
      "host %.0f GB/s, nvme %.0f GB/s\n\n",
      f.gpu_tflops, f.gpu_pool_blocks, f.decode_ms, f.watermark, engine.host_read_bytes_per_s / 1e9,
      engine.nvme_read_bytes_per_s / 1e9);
  for (const std::string& point : f.points) {
    double hf = 0, nf = 0;
    if (std::sscanf(point.c_str(), "%lf:%lf", &hf, &nf) != 2 || hf <= 0 || nf < 0) {
      std::cerr << "kvtier-bench sweep: --points: bad point '" << point
                << "'; expected host:nvme fractions like 0.05:0.30\n";
      return 2;
    }
    SweepCapacity cap{static_cast<uint64_t>(hf * double(unique)),
                      static_cast<uint64_t>(nf * double(unique))};
    std::vector<SweepResult> rows;
    for (const std::string& name : f.policies) {
      Result<SweepPolicy> policy = NamedSweepPolicy(name);
      if (!policy.ok()) {
        std::cerr << "kvtier-bench sweep: " << policy.status().message() << "\n";
        return 2;
      }
      const auto t0 = std::chrono::steady_clock::now();
      Result<SweepResult> r = RunSweepOne(*trace, engine, *policy, cap, knobs);
      if (!r.ok()) {
        std::cerr << "kvtier-bench sweep: " << name << ": " << r.status().ToString() << "\n";
        return 2;
      }
      std::fprintf(stderr, "%s @ %s: %.1f s\n", name.c_str(), point.c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      rows.push_back(std::move(*r));
    }
    std::printf("host %.0f%% / nvme %.0f%% of unique blocks\n\n%s\n", 100 * hf, 100 * nf,
                FormatSweepTable(rows, engine.BlockBytes()).c_str());
  }
  return 0;
}

}  // namespace kvtier::bench
