// The request pumps of `kvtier-bench nvme` and `kvtier-bench remote`: keep a
// fixed number of tier requests in flight and time them.
//
// Contract on failure: a pump returns only when none of the requests it
// issued is still running, so the caller may free the buffers they point to
// as soon as it returns (an early return with requests in flight would let a
// tier finish them into freed memory).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kvtier/completion.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::bench {

// Issues single-block requests 0..blocks-1, keeping `queue_depth` in flight;
// request i goes out on slot i % queue_depth, whose previous request has
// finished by then. Returns bytes per second (`block_bytes` per request), or
// the first failure once every issued request has finished.
// REQUIRES: queue_depth > 0.
Result<double> PumpBlocks(uint64_t blocks, uint32_t queue_depth, uint64_t block_bytes,
                          const std::function<Completion(uint64_t i, uint32_t slot)>& issue);

// The blocks of one in-flight batch of `kvtier-bench remote`: its own keys
// and its own part of the source and destination buffers.
struct Window {
  std::vector<WriteOp> writes;
  std::vector<ReadOp> reads;
  Completion pending;
};

// Issues `batches` batches keeping every window busy: a window's next batch
// goes out as soon as its previous one completes. Returns GB/s (10^9 bytes,
// `batch_bytes` per batch), or the first failure (with `what` as context)
// once every window's batch has finished.
// REQUIRES: !windows.empty().
Result<double> StreamWindows(std::vector<Window>& windows, uint64_t batches, uint64_t batch_bytes,
                             const std::function<Completion(Window&)>& issue, const char* what);

}  // namespace kvtier::bench
