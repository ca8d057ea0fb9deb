// `kvtier-bench nvme-path`: where the time of one NVMe tier read goes at
// queue depth 1. Four ways of reading the same number of blocks from the
// same file system, interleaved round by round so all see the same disk:
//   ring       one thread submits each read to its own io_uring and waits
//              for it there (what fio does);
//   ring+hash  the same, then XXH3 over the payload, as the tier verifies
//              every block it reads;
//   engine     the tier's I/O engine: the request goes to the engine's
//              thread, and its completion wakes the caller;
//   tier       the NVMe tier's Read of a block it wrote, into a registered
//              4 KiB-aligned buffer (index lookup, header page, checksum).
// Each row reports its best round, microseconds per read and the ratio to
// `ring`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct NvmePathOptions {
  std::string dir = ".";
  uint64_t block_bytes = 256 << 10;
  uint64_t total_bytes = 256ull << 20;  // bytes each way reads per round
  uint32_t rounds = 3;
  Status Validate() const;
};

struct NvmePathRow {
  std::string step;  // "ring", "ring+hash", "engine", "tier"
  double us_per_read = 0;
  double mb_s = 0;
  double vs_ring = 0;  // us_per_read / ring's
};

struct NvmePathReport {
  std::string dir;
  uint64_t block_bytes = 0;
  uint64_t reads = 0;  // per way and round
  uint32_t rounds = 0;
  bool direct_io = false;  // the ring file was opened O_DIRECT
  std::vector<NvmePathRow> rows;
};

// NotSupported in a build without io_uring; errors name the step that failed.
Result<NvmePathReport> RunNvmePathBench(const NvmePathOptions& options);
std::string FormatNvmePath(const NvmePathReport& report);

}  // namespace kvtier::bench
