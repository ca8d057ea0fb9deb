// FaultInjectingTier: wraps any Tier and injects the failures a real backend
// shows: errors at a rate, errors after N operations, added latency (ops then
// complete on a background thread), corrupted bytes on read, and failed
// removes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "kvtier/tier.h"

namespace kvtier::testing {

struct FaultOptions {
  double error_rate = 0.0;              // fraction of ops failed with `error`
  uint64_t fail_after_ops = UINT64_MAX; // ops beyond this many fail with `error`
  StatusCode error = StatusCode::kIOError;
  std::chrono::microseconds latency{0}; // added before each batch completes
  bool corrupt_on_read = false;         // flip a byte of every successful read
  bool truncate_on_read = false;        // report one byte less than was read
  uint64_t fail_removes = 0;            // the first this many removed keys fail with `error`
                                        // and stay stored (the tier was unreachable)
  bool local_index = false;             // claim a local index, as a persistent tier does:
                                        // the runtime adopts what Contains finds
  uint64_t seed = 42;
};

// The wrapper owns `inner` and shuts it down with itself.
std::unique_ptr<Tier> NewFaultInjectingTier(std::unique_ptr<Tier> inner, FaultOptions options);

}  // namespace kvtier::testing
