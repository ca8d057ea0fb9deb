#include "tools/bench/inflight.h"

#include <chrono>
#include <deque>

namespace kvtier::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::time_point since) {
  return std::chrono::duration<double>(SteadyClock::now() - since).count();
}

}  // namespace

Result<double> PumpBlocks(uint64_t blocks, uint32_t queue_depth, uint64_t block_bytes,
                          const std::function<Completion(uint64_t i, uint32_t slot)>& issue) {
  std::deque<Completion> inflight;
  Status failure;
  const auto start = SteadyClock::now();
  for (uint64_t i = 0; i < blocks || !inflight.empty();) {
    if (i < blocks && inflight.size() < queue_depth) {
      inflight.push_back(issue(i, static_cast<uint32_t>(i % queue_depth)));
      ++i;
      continue;
    }
    // After a failure nothing new goes out, but the loop still waits for
    // every request in flight: their buffers belong to the caller.
    Status st = inflight.front().Wait();
    inflight.pop_front();
    if (failure.ok() && !st.ok()) {
      failure = st;
      i = blocks;
    }
  }
  if (!failure.ok()) return failure;
  return static_cast<double>(blocks * block_bytes) / Seconds(start);
}

Result<double> StreamWindows(std::vector<Window>& windows, uint64_t batches, uint64_t batch_bytes,
                             const std::function<Completion(Window&)>& issue, const char* what) {
  const auto start = SteadyClock::now();
  Status failure;
  for (uint64_t b = 0; b < batches + windows.size(); ++b) {
    Window& w = windows[b % windows.size()];
    if (b >= windows.size()) {
      Status st = w.pending.Wait();
      if (!st.ok()) {
        failure = st.WithContext(what);
        break;
      }
    }
    if (b < batches) w.pending = issue(w);
  }
  if (!failure.ok()) {
    // The other windows may still have a batch in flight into the caller's
    // buffers; waiting on a finished (or never issued) one returns at once.
    for (Window& w : windows) (void)w.pending.Wait();
    return failure;
  }
  return static_cast<double>(batches * batch_bytes) / 1e9 / Seconds(start);
}

}  // namespace kvtier::bench
