// Metrics: the runtime's counters as a stream of named samples, so that an
// engine can publish them its own way, plus the two renderings the admin
// endpoint serves (Prometheus text exposition and a JSON document).
//
// Runtime::VisitMetrics(visitor) calls `visitor` once per sample. Names follow
// Prometheus conventions: `kvtier_` prefix, base units in the name
// (`_bytes`, `_seconds`), `_total` on counters. Samples of one metric family
// share name, help and type and differ in their labels, e.g.
//   kvtier_tier_capacity_bytes{tier="host",type="host"} 268435456
// The library keeps no global registry: every visit reads a fresh snapshot.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/export.h"

namespace kvtier {

struct RuntimeStats;

enum class MetricType : uint8_t {
  kCounter,    // only grows while the runtime lives
  kGauge,      // may go up and down
  kHistogram,  // a distribution: see HistogramSample
};

struct MetricLabel {
  std::string_view name;
  std::string_view value;
};

// A distribution with fixed buckets. cumulative_counts[i] counts samples
// <= upper_bounds[i]; `count` counts all of them (the "+Inf" bucket).
struct HistogramSample {
  std::span<const double> upper_bounds;         // strictly increasing, finite
  std::span<const uint64_t> cumulative_counts;  // same size as upper_bounds
  double sum = 0;
  uint64_t count = 0;
};

// One sample. Views stay valid only during the visitor call.
struct MetricSample {
  std::string_view name;  // [a-zA-Z_][a-zA-Z0-9_]*, without _bucket/_sum/_count
  std::string_view help;  // one line
  MetricType type = MetricType::kGauge;
  std::span<const MetricLabel> labels;
  double value = 0;                             // counters and gauges
  const HistogramSample* histogram = nullptr;   // histograms only
};

using MetricVisitor = std::function<void(const MetricSample&)>;

// Emits every metric of `stats` to `visitor`, families in a fixed order.
KVTIER_EXPORT void VisitRuntimeStats(const RuntimeStats& stats, const MetricVisitor& visitor);

// Collects samples and renders them in the Prometheus text exposition format
// (version 0.0.4): one HELP and TYPE line per family, its samples grouped
// under them in the order first seen, histograms as _bucket{le=...}, _sum and
// _count. Label values and help text are escaped. Not thread-safe.
class KVTIER_EXPORT PrometheusTextWriter {
 public:
  PrometheusTextWriter();
  ~PrometheusTextWriter();
  PrometheusTextWriter(const PrometheusTextWriter&) = delete;
  PrometheusTextWriter& operator=(const PrometheusTextWriter&) = delete;

  void Add(const MetricSample& sample);
  // A visitor that adds to this writer; valid while the writer lives.
  MetricVisitor Visitor();
  // The exposition text of everything added so far.
  std::string Text() const;

 private:
  struct Families;
  std::unique_ptr<Families> families_;
};

// The whole of `stats` in the Prometheus text format.
KVTIER_EXPORT std::string RenderPrometheusText(const RuntimeStats& stats);

// The whole of `stats` as one JSON object (the admin endpoint's /stats).
// Field names are those of RuntimeStats and TierStats; status codes are
// written by StatusCodeName.
KVTIER_EXPORT std::string RenderStatsJson(const RuntimeStats& stats);

}  // namespace kvtier
