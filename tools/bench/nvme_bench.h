// `kvtier-bench nvme`: the NVMe tier next to fio on the same file system, in
// the same run. For each block size, queue depth and direction, fio runs a
// sequential O_DIRECT job (ioengine=io_uring, direct=1) over its own file in
// `dir`, and the tier writes (then reads back) the same number of bytes into
// its data file in `dir`, keeping `queue depth` single-block requests in
// flight from 4 KiB-aligned buffers (as the host hub's slots are). MB/s
// counts payload bytes (10^6); the tier also writes a 4 KiB header page per
// block and group-commits its index (an fdatasync each time), which fio
// does only with NvmeBenchOptions::fio_fdatasync.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct NvmeBenchOptions {
  std::string dir = ".";  // both files live here
  std::vector<uint64_t> block_sizes = {256 << 10, 1 << 20};
  std::vector<uint32_t> queue_depths = {1, 32};
  uint64_t total_bytes = 512ull << 20;  // bytes per measurement
  std::string fio = "fio";              // the fio binary
  uint32_t rounds = 3;                  // alternating rounds; the best of each side is kept
  bool fio_fixedbufs = false;           // also give fio registered buffers and files
  // > 0: fio's writes fdatasync after every this many blocks, for a peer as
  // durable as the tier, which group-commits every nvme.commit_every_blocks
  // blocks (64 by default) and at every region it fills, each with an
  // fdatasync before its index learns the blocks; 0 = fio never syncs.
  uint32_t fio_fdatasync = 0;
  Status Validate() const;
};

struct NvmeBenchRow {
  uint64_t block_bytes = 0;
  uint32_t queue_depth = 0;
  std::string op;       // "write" or "read"
  double fio_mb_s = 0;  // 0 when fio is missing
  double tier_mb_s = 0;
  double ratio = 0;  // tier / fio; 0 when fio is missing
};

struct NvmeBenchReport {
  std::string dir;
  std::string fs;  // file system type of dir
  bool direct_io = false;
  bool fio_found = false;
  std::string fio_version;
  uint32_t rounds = 0;
  bool fio_fixedbufs = false;
  uint32_t fio_fdatasync = 0;
  bool all_registered = true;  // every run's buffers became fixed buffers
  std::vector<NvmeBenchRow> rows;
};

// Errors when a tier run fails, or when fio is installed but fails or its
// output lacks the bandwidth (a clear message, never an exception).
Result<NvmeBenchReport> RunNvmeBench(const NvmeBenchOptions& options);
// jobs[0].<op>.bw_bytes of fio's --output-format=json; Internal naming what
// is missing when the output is not JSON or lacks it.
Result<double> ParseFioBandwidth(std::string_view json, const std::string& op);
std::string FormatNvmeBench(const NvmeBenchReport& report);
std::string NvmeBenchJson(const NvmeBenchReport& report);

}  // namespace kvtier::bench
