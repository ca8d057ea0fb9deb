// `kvtier-bench host`: the host tier's write+read throughput next to plain
// memcpy of the same bytes in the same pattern, single-threaded.
//
// Per block size, one round moves batches of `queue_depth` blocks: Write
// them into a host tier, then Read them back into a destination buffer.
// The memcpy baseline does the same two copies per block (source -> slot,
// slot -> destination) over buffers of the same shape. Rounds of the two
// alternate and the best of each is kept, so a noisy neighbour hurts both.
// The tier's arena is mapped without huge pages, like the memcpy buffers, so
// the ratio does not compare page kinds.
#pragma once

#include <cstdint>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct HostBenchOptions {
  std::vector<uint64_t> block_sizes = {64 << 10, 256 << 10, 1 << 20, 4 << 20};
  uint64_t total_bytes = 512ull << 20;       // bytes moved per measurement (writes + reads)
  uint32_t queue_depth = 16;                 // blocks per Write / Read batch
  uint32_t rounds = 3;                       // alternating tier / memcpy measurements
  uint64_t working_set_bytes = 64ull << 20;  // at least 64 blocks
  Status Validate() const;
};

struct HostBenchRow {
  uint64_t block_bytes = 0;
  uint32_t queue_depth = 0;
  uint64_t working_set_blocks = 0;
  double tier_mb_s = 0;  // MB = 10^6 bytes
  double memcpy_mb_s = 0;
  double ratio = 0;  // tier / memcpy
};

// One row per block size. Errors when the tier cannot be built or an I/O
// fails (a benchmark of failing I/O means nothing); ResourceExhausted when
// the buffers cannot be allocated.
Result<std::vector<HostBenchRow>> RunHostBench(const HostBenchOptions& options);

}  // namespace kvtier::bench
