// Command-line wiring of `kvtier-bench nvme` (kept out of main.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kvtier::bench {

struct NvmeBenchFlags {
  std::string dir = ".";
  std::vector<std::string> block_sizes = {"256KiB", "1MiB"};
  std::vector<uint32_t> queue_depths = {1, 32};
  std::string total = "512MiB";
  std::string fio = "fio";
  uint32_t rounds = 3;
  bool fio_fixedbufs = false;
  uint32_t fio_fdatasync = 0;
  bool json = false;
};

struct NvmePathFlags {
  std::string dir = ".";
  std::string block_size = "256KiB";
  std::string total = "256MiB";
  uint32_t rounds = 3;
};

void AddNvmeBenchCommand(CLI::App& app, NvmeBenchFlags& flags);
void AddNvmePathCommand(CLI::App& app, NvmePathFlags& flags);
// Runs the comparison and prints the table; returns the process exit code
// (0 ok, 2 bad usage or a failed run).
int RunNvmeBenchCommand(const NvmeBenchFlags& flags);
// `kvtier-bench nvme-path`: the queue-depth-1 read taken apart; same exit
// codes.
int RunNvmePathCommand(const NvmePathFlags& flags);

}  // namespace kvtier::bench
