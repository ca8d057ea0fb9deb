// `kvtier-bench growth`: the longest stall of the maps that grow under the
// runtime's lock (the `reuse` learner, marconi's tree, the block index) as
// they fill to millions of entries, next to one std::unordered_map taking
// the same ids, which rehashes all its entries at once each time it grows.
//
// Requests of `blocks_per_request` new blocks (ids from a mixed counter, so
// no two requests share one) are fed one at a time; each request's call is
// timed. The peer does nothing but insert the request's ids into one map of
// 64-byte values, the size of a learner's node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct GrowthBenchOptions {
  uint64_t blocks = uint64_t{1} << 22;  // entries each map ends with
  uint32_t blocks_per_request = 64;
  Status Validate() const;
};

struct GrowthBenchRow {
  std::string what;
  uint64_t entries = 0;
  uint64_t calls = 0;
  double longest_ms = 0;
  double p999_ms = 0;  // 99.9th percentile call
  double total_s = 0;
};

// The three product structures, then the peer (last row).
Result<std::vector<GrowthBenchRow>> RunGrowthBench(const GrowthBenchOptions& options);

}  // namespace kvtier::bench
