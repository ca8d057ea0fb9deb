// Command-line wiring of `kvtier-bench remote` (kept out of main.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kvtier::bench {

struct RemoteBenchFlags {
  std::string block_size = "1MiB";
  std::string total = "1GiB";
  uint32_t queue_depth = 4;
  uint32_t batches_in_flight = 2;
  uint32_t connections = 2;
  uint32_t rounds = 5;
  std::vector<std::string> servers;  // empty: an in-process kvtier-memd
  std::string secret_file;
};

void AddRemoteBenchCommand(CLI::App& app, RemoteBenchFlags& flags);
// Runs the comparison and prints the table; returns the exit code (0 ok,
// 2 bad usage or a failed run).
int RunRemoteBenchCommand(const RemoteBenchFlags& flags);

}  // namespace kvtier::bench
