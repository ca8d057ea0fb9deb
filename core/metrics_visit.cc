// RuntimeStats as metric samples: the one list of metric names, help texts
// and labels. The Prometheus and engine-side views both come from here.
#include <array>
#include <string>
#include <vector>

#include "kvtier/metrics.h"
#include "kvtier/runtime.h"

namespace kvtier {
namespace {

class Emitter {
 public:
  explicit Emitter(const MetricVisitor& visitor) : visitor_(visitor) {}

  void Counter(std::string_view name, std::string_view help, uint64_t value,
               std::span<const MetricLabel> labels = {}) {
    Emit(name, help, MetricType::kCounter, static_cast<double>(value), labels);
  }
  void Gauge(std::string_view name, std::string_view help, uint64_t value,
             std::span<const MetricLabel> labels) {
    Emit(name, help, MetricType::kGauge, static_cast<double>(value), labels);
  }
  void GaugeReal(std::string_view name, std::string_view help, double value,
                 std::span<const MetricLabel> labels) {
    Emit(name, help, MetricType::kGauge, value, labels);
  }
  void Histogram(std::string_view name, std::string_view help, const LatencyStats& s) {
    std::vector<uint64_t> cumulative;
    uint64_t running = 0;
    for (size_t i = 0; i < s.upper_bounds_s.size() && i < s.bucket_counts.size(); ++i) {
      running += s.bucket_counts[i];
      cumulative.push_back(running);
    }
    HistogramSample h{std::span(s.upper_bounds_s).first(cumulative.size()), cumulative, s.sum_s,
                      s.count};
    MetricSample m{name, help, MetricType::kHistogram, {}, 0, &h};
    visitor_(m);
  }

 private:
  void Emit(std::string_view name, std::string_view help, MetricType type, double value,
            std::span<const MetricLabel> labels) {
    MetricSample m{name, help, type, labels, value, nullptr};
    visitor_(m);
  }
  const MetricVisitor& visitor_;
};

void VisitRequests(const RuntimeStats& s, Emitter& e) {
  e.Counter("kvtier_lookups_total", "Lookup and LookupAndPin calls", s.lookups);
  e.Counter("kvtier_lookup_blocks_total", "blocks asked for by lookups", s.lookup_blocks);
  e.Counter("kvtier_hits_blocks_total", "leading blocks lookups found stored",
            s.lookup_hit_blocks);
  const uint64_t misses = s.lookup_blocks - std::min(s.lookup_blocks, s.lookup_hit_blocks);
  e.Counter("kvtier_misses_blocks_total", "blocks lookups did not find (from the first miss on)",
            misses);
  e.Counter("kvtier_state_cut_blocks_total",
            "blocks lookups found stored but did not answer: no state checkpoint at or past them",
            s.lookup_state_cut_blocks);
  if (s.block_tokens != 0) {
    e.Counter("kvtier_hits_tokens_total", "tokens of the blocks lookups found",
              s.lookup_hit_blocks * s.block_tokens);
    e.Counter("kvtier_misses_tokens_total", "tokens of the blocks lookups did not find",
              misses * s.block_tokens);
  }
  e.Counter("kvtier_save_requested_blocks_total", "blocks asked to be saved", s.save_blocks);
  e.Counter("kvtier_saved_blocks_total", "blocks newly stored by saves", s.saved_blocks);
  e.Counter("kvtier_save_duplicate_blocks_total", "blocks a save skipped as already stored",
            s.save_duplicates);
  e.Counter("kvtier_save_failed_blocks_total", "blocks a save failed", s.save_failures);
  e.Counter("kvtier_save_not_admitted_blocks_total",
            "blocks a save did not store: the hub's admission refused them or a parent",
            s.save_not_admitted);
  e.Counter("kvtier_load_requested_blocks_total", "blocks asked to be loaded", s.load_blocks);
  e.Counter("kvtier_loaded_blocks_total", "blocks loaded into the engine", s.loaded_blocks);
  e.Counter("kvtier_load_failed_blocks_total", "blocks a load reported as failed",
            s.load_failures);
  e.Counter("kvtier_busy_rejections_total", "requests refused because the queue was full",
            s.busy_rejections);
  e.Counter("kvtier_adopted_blocks_total",
            "blocks the index did not know found in a lower tier (a persistent tier after a "
            "restart, a shared tier from another process) and adopted",
            s.adopted_blocks);
  e.Counter("kvtier_preemption_proposals_total", "requests proposed to the engine for preemption",
            s.preemption_proposals);
  uint64_t corruptions = 0;
  for (const TierStats& t : s.tiers) corruptions += t.corruptions;
  e.Counter("kvtier_corruptions_total", "blocks that failed their header or checksum check",
            corruptions);
  for (const ErrorStats& err : s.errors) {
    const std::array<MetricLabel, 2> labels = {
        {{"op", err.op}, {"code", StatusCodeName(err.code)}}};
    e.Counter("kvtier_errors_total", "per-block save and load failures by status code",
              err.blocks, labels);
  }
  for (const MoveStats& m : s.moves) {
    const std::array<MetricLabel, 2> labels = {{{"from", m.from}, {"to", m.to}}};
    e.Counter("kvtier_moved_blocks_total", "blocks copied between tiers (gpu: the engine)",
              m.blocks, labels);
    e.Counter("kvtier_moved_bytes_total", "bytes copied between tiers (gpu: the engine)", m.bytes,
              labels);
  }
}

void VisitTier(const RuntimeStats& s, const TierStats& t, Emitter& e) {
  const std::array<MetricLabel, 2> l = {{{"tier", t.name}, {"type", t.type}}};
  e.Gauge("kvtier_tier_capacity_bytes", "bytes the tier may hold", t.capacity_bytes, l);
  e.Gauge("kvtier_tier_used_bytes", "bytes the tier holds", t.used_bytes, l);
  e.Gauge("kvtier_tier_blocks", "blocks the tier holds", t.blocks, l);
  e.Gauge("kvtier_tier_unclaimed_blocks",
          "blocks a restart found stored that no lookup has adopted yet (not in blocks)",
          t.unclaimed_blocks, l);
  e.Gauge("kvtier_tier_unclaimed_bytes", "bytes of the unclaimed blocks (not in used_bytes)",
          t.unclaimed_bytes, l);
  e.Counter("kvtier_tier_hits_blocks_total", "blocks loads served from the tier", t.hit_blocks, l);
  if (s.block_tokens != 0) {
    e.Counter("kvtier_tier_hits_tokens_total", "tokens of the blocks loads served from the tier",
              t.hit_blocks * s.block_tokens, l);
  }
  e.Counter("kvtier_tier_read_bytes_total", "bytes read out of the tier", t.bytes_read, l);
  e.Counter("kvtier_tier_written_bytes_total", "bytes written into the tier", t.bytes_written, l);
  e.Counter("kvtier_tier_written_blocks_total", "blocks written into the tier", t.blocks_written,
            l);
  e.Counter("kvtier_tier_evicted_blocks_total", "blocks the mover dropped from the tier",
            t.evicted_blocks, l);
  e.Counter("kvtier_tier_demoted_blocks_total", "blocks copied from the tier to the next one",
            t.demoted_blocks, l);
  e.Counter("kvtier_tier_rejected_blocks_total", "blocks the mover could not take out of the tier",
            t.rejected_blocks, l);
  for (bool accepted : {true, false}) {
    const std::array<MetricLabel, 3> al = {
        {l[0], l[1], {"result", accepted ? "accepted" : "rejected"}}};
    e.Counter("kvtier_tier_admissions_total", "admission policy decisions for the tier",
              accepted ? t.admitted_blocks : t.admission_rejected_blocks, al);
  }
  e.Counter("kvtier_tier_forced_writes_total",
            "blocks written into the tier although its admission refused them (a child below "
            "needs them)",
            t.forced_blocks, l);
  e.Counter("kvtier_tier_errors_total", "failed tier reads and writes (not misses)", t.errors, l);
  e.Counter("kvtier_tier_corruptions_total", "blocks of the tier that failed their check",
            t.corruptions, l);
  if (t.flop_alpha >= 0) {  // flop_aware tiers only
    e.GaugeReal("kvtier_tier_flop_alpha",
                "flop_aware eviction: weight of prefill FLOPs saved against recency", t.flop_alpha,
                l);
    e.Counter("kvtier_tier_alpha_tunings_total", "flop_aware alpha tunings the mover ran",
              t.alpha_tunings, l);
  }
}

}  // namespace

void VisitRuntimeStats(const RuntimeStats& stats, const MetricVisitor& visitor) {
  Emitter e(visitor);
  VisitRequests(stats, e);
  for (const TierStats& t : stats.tiers) VisitTier(stats, t, e);
  e.Histogram("kvtier_save_latency_seconds", "time from a Save call to its completion",
              stats.save_latency);
  e.Histogram("kvtier_load_latency_seconds", "time from a Load call to its completion",
              stats.load_latency);
}

void Runtime::VisitMetrics(const MetricVisitor& visitor) const {
  VisitRuntimeStats(Stats(), visitor);
}

std::string RenderPrometheusText(const RuntimeStats& stats) {
  PrometheusTextWriter writer;
  VisitRuntimeStats(stats, writer.Visitor());
  return writer.Text();
}

}  // namespace kvtier
