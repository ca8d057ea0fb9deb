#include "tools/bench/growth_bench_cli.h"

#include <cstdio>
#include <iostream>

#include "tools/bench/cli_checks.h"

namespace kvtier::bench {

void AddGrowthBenchCommand(CLI::App& app, GrowthBenchOptions& o) {
  CLI::App* cmd =
      app.add_subcommand("growth",
                         "longest stall of the learners and the block index as they grow, vs one "
                         "std::unordered_map");
  cmd->add_option("--blocks", o.blocks, "entries each map ends with (at most 2^23)")
      ->check(kUnsigned64)
      ->capture_default_str();
  cmd->add_option("--blocks-per-request", o.blocks_per_request, "new blocks per request")
      ->check(kUnsigned32)
      ->capture_default_str();
}

int RunGrowthBenchCommand(const GrowthBenchOptions& o) {
  Result<std::vector<GrowthBenchRow>> rows = RunGrowthBench(o);
  if (!rows.ok()) {
    std::cerr << "kvtier-bench growth: " << rows.status().message() << "\n";
    return 2;
  }
  const GrowthBenchRow& peer = rows->back();
  std::printf("%llu new blocks per request; a call = one request's blocks\n\n",
              static_cast<unsigned long long>(o.blocks_per_request));
  std::printf(
      "| structure | entries | calls | longest call ms | p99.9 ms | total s | "
      "peer longest / longest |\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (const GrowthBenchRow& r : *rows) {
    std::printf("| %s | %llu | %llu | %.2f | %.3f | %.2f | %.1f |\n", r.what.c_str(),
                static_cast<unsigned long long>(r.entries),
                static_cast<unsigned long long>(r.calls), r.longest_ms, r.p999_ms, r.total_s,
                r.longest_ms > 0 ? peer.longest_ms / r.longest_ms : 0.0);
  }
  return 0;
}

}  // namespace kvtier::bench
