// RuntimeMetrics: the runtime's counters beyond the index-side ones of
// RuntimeImpl (bytes moved per path, admissions, preemption proposals,
// errors by status code, save/load latency). Every counter is a relaxed
// atomic, so any thread may record without holding the runtime's lock; a
// snapshot is not a consistent cut across counters, which metrics never are.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/completion.h"
#include "kvtier/env.h"
#include "kvtier/options.h"
#include "kvtier/runtime.h"

namespace kvtier::internal {

// Fixed-bucket latency histogram; Record is wait-free.
class LatencyRecorder {
 public:
  // Upper bounds in seconds, from 50 us to 10 s.
  static constexpr std::array<double, 17> kBoundsS = {
      50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
      50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};

  void Record(uint64_t elapsed_ns);
  LatencyStats Snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, kBoundsS.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

class RuntimeMetrics {
 public:
  // Endpoint index of the engine's KV cache in AddMove; tiers are 0..n-1.
  static constexpr size_t kEngine = kMaxTiers;
  enum class Op : uint8_t { kSave, kLoad };

  // `blocks` blocks of `bytes` bytes in all copied from endpoint `from` to `to`.
  void AddMove(size_t from, size_t to, uint64_t blocks, uint64_t bytes);
  // The admission policy of tier `tier` accepted (or refused) `blocks` blocks.
  void AddAdmission(size_t tier, bool admitted, uint64_t blocks = 1);
  void AddPreemptionProposals(uint64_t n);
  // Records a request that ran for `elapsed_ns` and counts its items' non-OK
  // results by code. Called before `done` is finished, so that a caller
  // whose Wait() returned already sees the request in Stats().
  void RecordRequest(Op op, const CompletionSource& done, uint64_t elapsed_ns);
  // Counts `blocks` failures with `code` of a request that never ran.
  void AddFailures(Op op, StatusCode code, uint64_t blocks);

  // Copies between the engine and the hub, which the runtime counts itself.
  struct EngineTraffic {
    uint64_t saved_blocks = 0, saved_bytes = 0;    // gpu -> hub
    uint64_t loaded_blocks = 0, loaded_bytes = 0;  // hub -> gpu
  };
  // Fills the fields of `out` this object owns (moves, errors, latencies,
  // preemption proposals, per-tier admissions). REQUIRES: out->tiers holds
  // every tier, in order.
  void Fill(const EngineTraffic& engine, RuntimeStats* out) const;

 private:
  static constexpr size_t kEndpoints = kMaxTiers + 1;
  static constexpr size_t kCodes = static_cast<size_t>(StatusCode::kInternal) + 1;
  struct Path {
    std::atomic<uint64_t> blocks{0};
    std::atomic<uint64_t> bytes{0};
  };
  void AddPathStats(RuntimeStats* out, size_t from, size_t to, uint64_t extra_blocks = 0,
                    uint64_t extra_bytes = 0) const;

  std::array<std::array<Path, kEndpoints>, kEndpoints> paths_{};
  std::array<std::atomic<uint64_t>, kMaxTiers> admitted_{};
  std::array<std::atomic<uint64_t>, kMaxTiers> not_admitted_{};
  std::atomic<uint64_t> preemption_proposals_{0};
  std::array<std::array<std::atomic<uint64_t>, kCodes>, 2> errors_{};
  LatencyRecorder save_latency_;
  LatencyRecorder load_latency_;
};

}  // namespace kvtier::internal
