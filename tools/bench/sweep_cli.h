// Command-line wiring of `kvtier-bench sweep` (kept out of main.cc).
#pragma once

#include <CLI/CLI.hpp>

#include "tools/bench/sweep_args.h"

namespace kvtier::bench {

void AddSweepCommand(CLI::App& app, SweepFlags& flags);
// Runs the sweep and prints the tables; returns the process exit code.
int RunSweepCommand(const SweepFlags& flags);

}  // namespace kvtier::bench
