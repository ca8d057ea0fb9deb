#include "core/metrics.h"

#include <algorithm>

namespace kvtier::internal {

// Every counter here is a statistic: nothing is ordered by it, so relaxed
// increments and loads are enough.
constexpr auto kRelaxed = std::memory_order_relaxed;

void LatencyRecorder::Record(uint64_t elapsed_ns) {
  const double s = static_cast<double>(elapsed_ns) * 1e-9;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(kBoundsS.begin(), kBoundsS.end(), s) - kBoundsS.begin());
  buckets_[bucket].fetch_add(1, kRelaxed);
  count_.fetch_add(1, kRelaxed);
  sum_ns_.fetch_add(elapsed_ns, kRelaxed);
}

LatencyStats LatencyRecorder::Snapshot() const {
  LatencyStats out;
  out.upper_bounds_s.assign(kBoundsS.begin(), kBoundsS.end());
  uint64_t total = 0;
  for (const auto& b : buckets_) {
    out.bucket_counts.push_back(b.load(kRelaxed));
    total += out.bucket_counts.back();
  }
  // The buckets are read one by one while requests finish; report the count
  // they add up to, so that the histogram is internally consistent.
  out.count = total;
  out.sum_s = static_cast<double>(sum_ns_.load(kRelaxed)) * 1e-9;
  return out;
}

void RuntimeMetrics::AddMove(size_t from, size_t to, uint64_t blocks, uint64_t bytes) {
  if (from >= kEndpoints || to >= kEndpoints) return;
  paths_[from][to].blocks.fetch_add(blocks, kRelaxed);
  paths_[from][to].bytes.fetch_add(bytes, kRelaxed);
}

void RuntimeMetrics::AddAdmission(size_t tier, bool admitted, uint64_t blocks) {
  if (tier >= kMaxTiers) return;
  (admitted ? admitted_ : not_admitted_)[tier].fetch_add(blocks, kRelaxed);
}

void RuntimeMetrics::AddPreemptionProposals(uint64_t n) {
  preemption_proposals_.fetch_add(n, kRelaxed);
}

void RuntimeMetrics::RecordRequest(Op op, const CompletionSource& done, uint64_t elapsed_ns) {
  (op == Op::kSave ? save_latency_ : load_latency_).Record(elapsed_ns);
  auto& codes = errors_[static_cast<size_t>(op)];
  for (size_t i = 0; i < done.size(); ++i) {
    const StatusCode code = done.result(i).code();
    if (code != StatusCode::kOk) codes[static_cast<size_t>(code)].fetch_add(1, kRelaxed);
  }
}

void RuntimeMetrics::AddFailures(Op op, StatusCode code, uint64_t blocks) {
  if (code == StatusCode::kOk || blocks == 0) return;
  errors_[static_cast<size_t>(op)][static_cast<size_t>(code)].fetch_add(blocks, kRelaxed);
}

void RuntimeMetrics::AddPathStats(RuntimeStats* out, size_t from, size_t to,
                                  uint64_t extra_blocks, uint64_t extra_bytes) const {
  auto name = [&](size_t e) { return e == kEngine ? std::string("gpu") : out->tiers[e].name; };
  const Path& p = paths_[from][to];
  out->moves.push_back({name(from), name(to), p.blocks.load(kRelaxed) + extra_blocks,
                        p.bytes.load(kRelaxed) + extra_bytes});
}

void RuntimeMetrics::Fill(const EngineTraffic& engine, RuntimeStats* out) const {
  const size_t n = std::min(out->tiers.size(), kMaxTiers);
  out->moves.clear();
  // The paths the runtime uses always appear, even at zero, so that a
  // monitoring system sees a stable set of series; any other path with
  // traffic follows.
  std::array<std::array<bool, kEndpoints>, kEndpoints> listed{};
  auto add = [&](size_t from, size_t to) {
    listed[from][to] = true;
    AddPathStats(out, from, to);
  };
  if (n > 0) {
    listed[kEngine][0] = listed[0][kEngine] = true;
    AddPathStats(out, kEngine, 0, engine.saved_blocks, engine.saved_bytes);
    AddPathStats(out, 0, kEngine, engine.loaded_blocks, engine.loaded_bytes);
  }
  for (size_t t = 1; t < n; ++t) {
    add(t - 1, t);
    add(t, 0);
  }
  for (size_t from = 0; from < kEndpoints; ++from) {
    for (size_t to = 0; to < kEndpoints; ++to) {
      const bool known = (from < n || from == kEngine) && (to < n || to == kEngine);
      if (known && !listed[from][to] && paths_[from][to].blocks.load(kRelaxed) != 0) {
        AddPathStats(out, from, to);
      }
    }
  }
  for (size_t t = 0; t < n; ++t) {
    out->tiers[t].admitted_blocks = admitted_[t].load(kRelaxed);
    out->tiers[t].admission_rejected_blocks = not_admitted_[t].load(kRelaxed);
  }
  out->preemption_proposals = preemption_proposals_.load(kRelaxed);
  out->errors.clear();
  for (size_t op = 0; op < 2; ++op) {
    for (size_t code = 0; code < kCodes; ++code) {
      const uint64_t v = errors_[op][code].load(kRelaxed);
      if (v == 0) continue;
      out->errors.push_back({op == 0 ? "save" : "load", static_cast<StatusCode>(code), v});
    }
  }
  out->save_latency = save_latency_.Snapshot();
  out->load_latency = load_latency_.Snapshot();
}

}  // namespace kvtier::internal
