// Command-line wiring of `kvtier-bench growth` (kept out of main.cc).
#pragma once

#include <CLI/CLI.hpp>

#include "tools/bench/growth_bench.h"

namespace kvtier::bench {

void AddGrowthBenchCommand(CLI::App& app, GrowthBenchOptions& options);
// Runs the comparison and prints the table; returns the process exit code
// (0 ok, 2 bad usage).
int RunGrowthBenchCommand(const GrowthBenchOptions& options);

}  // namespace kvtier::bench
