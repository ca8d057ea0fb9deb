#include "tools/bench/nvme_bench_cli.h"

#include <iostream>

#include "kvtier/config.h"
#include "tools/bench/nvme_bench.h"
#include "tools/bench/nvme_path_bench.h"

namespace kvtier::bench {

void AddNvmeBenchCommand(CLI::App& app, NvmeBenchFlags& f) {
  CLI::App* cmd =
      app.add_subcommand("nvme", "NVMe tier vs fio (io_uring, O_DIRECT), same file system");
  cmd->add_option("--dir", f.dir, "directory for the fio and tier files")->capture_default_str();
  cmd->add_option("--block-sizes", f.block_sizes, "comma-separated block sizes")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--queue-depths", f.queue_depths, "comma-separated queue depths")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--total", f.total, "bytes per measurement")->capture_default_str();
  cmd->add_option("--fio", f.fio, "fio binary")->capture_default_str();
  cmd->add_option("--rounds", f.rounds, "alternating rounds; the best of each side is kept")
      ->capture_default_str();
  cmd->add_flag("--fio-fixedbufs", f.fio_fixedbufs,
                "run fio with --fixedbufs=1 --registerfiles=1 too (registered buffers)");
  cmd->add_option("--fio-fdatasync", f.fio_fdatasync,
                  "fio's writes fdatasync every N blocks (the tier commits, with an fdatasync, "
                  "every 64 blocks and every region); 0 = never")
      ->capture_default_str();
  cmd->add_flag("--json", f.json, "print one JSON object");
}

int RunNvmeBenchCommand(const NvmeBenchFlags& f) {
  NvmeBenchOptions o;
  o.dir = f.dir;
  o.fio = f.fio;
  o.rounds = f.rounds;
  o.fio_fixedbufs = f.fio_fixedbufs;
  o.fio_fdatasync = f.fio_fdatasync;
  o.queue_depths = f.queue_depths;
  o.block_sizes.clear();
  for (const std::string& text : f.block_sizes) {
    Result<uint64_t> size = ParseByteSize(text);
    if (!size.ok()) {
      std::cerr << "kvtier-bench nvme: --block-sizes: " << size.status().message() << "\n";
      return 2;
    }
    o.block_sizes.push_back(*size);
  }
  Result<uint64_t> total = ParseByteSize(f.total);
  if (!total.ok()) {
    std::cerr << "kvtier-bench nvme: --total: " << total.status().message() << "\n";
    return 2;
  }
  o.total_bytes = *total;
  Result<NvmeBenchReport> rep = RunNvmeBench(o);
  if (!rep.ok()) {
    std::cerr << "kvtier-bench nvme: " << rep.status().ToString() << "\n";
    return 2;
  }
  std::cout << (f.json ? NvmeBenchJson(*rep) + "\n" : FormatNvmeBench(*rep));
  return 0;
}

void AddNvmePathCommand(CLI::App& app, NvmePathFlags& f) {
  CLI::App* cmd =
      app.add_subcommand("nvme-path",
                         "where a queue-depth-1 NVMe tier read spends its time: io_uring in one "
                         "thread, plus the payload hash, the I/O engine, the tier");
  cmd->add_option("--dir", f.dir, "directory for the scratch files")->capture_default_str();
  cmd->add_option("--block-size", f.block_size, "bytes per read")->capture_default_str();
  cmd->add_option("--total", f.total, "bytes each way reads per round")->capture_default_str();
  cmd->add_option("--rounds", f.rounds, "interleaved rounds; the best of each way is kept")
      ->capture_default_str();
}

int RunNvmePathCommand(const NvmePathFlags& f) {
  NvmePathOptions o;
  o.dir = f.dir;
  o.rounds = f.rounds;
  Result<uint64_t> bs = ParseByteSize(f.block_size);
  Result<uint64_t> total = ParseByteSize(f.total);
  if (!bs.ok() || !total.ok()) {
    std::cerr << "kvtier-bench nvme-path: " << (bs.ok() ? "--total: " : "--block-size: ")
              << (bs.ok() ? total : bs).status().message() << "\n";
    return 2;
  }
  o.block_bytes = *bs;
  o.total_bytes = *total;
  Result<NvmePathReport> rep = RunNvmePathBench(o);
  if (!rep.ok()) {
    std::cerr << "kvtier-bench nvme-path: " << rep.status().ToString() << "\n";
    return 2;
  }
  std::cout << FormatNvmePath(*rep);
  return 0;
}

}  // namespace kvtier::bench
