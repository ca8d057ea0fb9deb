// Command-line wiring of `kvtier-bench redis` (kept out of main.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kvtier::bench {

struct RedisBenchFlags {
  std::string server;  // empty: start a redis-server on a free port
  std::string password;
  bool tls = false;
  std::string tls_ca_file;
  std::vector<std::string> value_sizes = {"64KiB", "1MiB"};
  uint32_t pipeline = 16;
  uint32_t clients = 4;
  std::string total = "512MiB";
  uint32_t rounds = 3;
  bool json = false;
};

void AddRedisBenchCommand(CLI::App& app, RedisBenchFlags& flags);
// Runs the comparison and prints the table; returns the process exit code
// (0 ok, 2 bad usage or a failed run).
int RunRedisBenchCommand(const RedisBenchFlags& flags);

}  // namespace kvtier::bench
