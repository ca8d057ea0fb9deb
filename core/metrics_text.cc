// Text renderings of the metrics: Prometheus exposition and JSON.
#include <charconv>
#include <cstdio>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kvtier/metrics.h"
#include "kvtier/runtime.h"

namespace kvtier {
namespace {

// Whole numbers print without a fraction (counters stay exact up to 2^53);
// others in the shortest form that reads back to the same double.
std::string FormatNumber(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// Label values escape backslash, double quote and line feed; help text only
// backslash and line feed (the exposition format's two rules).
std::string Escape(std::string_view s, bool quotes) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string LabelSet(std::span<const MetricLabel> labels, std::string_view le = {}) {
  if (labels.empty() && le.empty()) return "";
  std::string out = "{";
  for (const MetricLabel& l : labels) {
    if (out.size() > 1) out += ',';
    out += std::string(l.name) + "=\"" + Escape(l.value, true) + "\"";
  }
  if (!le.empty()) {
    if (out.size() > 1) out += ',';
    out += "le=\"" + std::string(le) + "\"";
  }
  return out + "}";
}

std::string_view TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

struct PrometheusTextWriter::Families {
  struct Family {
    std::string header;  // HELP and TYPE lines
    std::string samples;
  };
  std::vector<Family> list;            // in the order first seen
  std::map<std::string, size_t> index;  // name -> position in list
};

PrometheusTextWriter::PrometheusTextWriter() : families_(std::make_unique<Families>()) {}
PrometheusTextWriter::~PrometheusTextWriter() = default;

void PrometheusTextWriter::Add(const MetricSample& m) {
  const std::string name(m.name);
  auto [it, inserted] = families_->index.emplace(name, families_->list.size());
  if (inserted) {
    families_->list.push_back({"# HELP " + name + " " + Escape(m.help, false) + "\n# TYPE " +
                                   name + " " + std::string(TypeName(m.type)) + "\n",
                               ""});
  }
  std::string& out = families_->list[it->second].samples;
  if (m.type != MetricType::kHistogram || m.histogram == nullptr) {
    out += name + LabelSet(m.labels) + " " + FormatNumber(m.value) + "\n";
    return;
  }
  const HistogramSample& h = *m.histogram;
  for (size_t i = 0; i < h.upper_bounds.size() && i < h.cumulative_counts.size(); ++i) {
    out += name + "_bucket" + LabelSet(m.labels, FormatNumber(h.upper_bounds[i])) + " " +
           std::to_string(h.cumulative_counts[i]) + "\n";
  }
  out += name + "_bucket" + LabelSet(m.labels, "+Inf") + " " + std::to_string(h.count) + "\n";
  out += name + "_sum" + LabelSet(m.labels) + " " + FormatNumber(h.sum) + "\n";
  out += name + "_count" + LabelSet(m.labels) + " " + std::to_string(h.count) + "\n";
}

MetricVisitor PrometheusTextWriter::Visitor() {
  return [this](const MetricSample& m) { Add(m); };
}

std::string PrometheusTextWriter::Text() const {
  std::string out;
  for (const auto& f : families_->list) out += f.header + f.samples;
  return out;
}

// ---- JSON ------------------------------------------------------------------

namespace {

class JsonObject {
 public:
  explicit JsonObject(std::string* out) : out_(out) { *out_ += '{'; }
  void Num(std::string_view key, double v) { Key(key) += FormatJsonNumber(v); }
  void Str(std::string_view key, std::string_view v) { Key(key) += Quote(v); }
  std::string& Key(std::string_view key) {
    if (!first_) *out_ += ',';
    first_ = false;
    return *out_ += Quote(key) + ":";
  }
  void Close() { *out_ += '}'; }

  static std::string FormatJsonNumber(double v) {
    return std::isfinite(v) ? FormatNumber(v) : "null";
  }
  static std::string Quote(std::string_view s) {
    std::string q = "\"";
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        q += '\\';
        q += c;
      } else if (u < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", u);
        q += buf;
      } else {
        q += c;
      }
    }
    return q + "\"";
  }

 private:
  std::string* out_;
  bool first_ = true;
};

template <typename T>
std::string JsonArray(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    out += JsonObject::FormatJsonNumber(static_cast<double>(v[i]));
  }
  return out + "]";
}

void WriteLatency(std::string* out, const LatencyStats& l) {
  JsonObject o(out);
  o.Key("upper_bounds_s") += JsonArray(l.upper_bounds_s);
  o.Key("bucket_counts") += JsonArray(l.bucket_counts);
  o.Num("count", static_cast<double>(l.count));
  o.Num("sum_s", l.sum_s);
  o.Close();
}

void WriteTier(std::string* out, const TierStats& t) {
  JsonObject o(out);
  o.Str("name", t.name);
  o.Str("type", t.type);
  const std::pair<std::string_view, uint64_t> fields[] = {
      {"capacity_bytes", t.capacity_bytes},
      {"used_bytes", t.used_bytes},
      {"blocks", t.blocks},
      {"unclaimed_blocks", t.unclaimed_blocks},
      {"unclaimed_bytes", t.unclaimed_bytes},
      {"hit_blocks", t.hit_blocks},
      {"bytes_read", t.bytes_read},
      {"bytes_written", t.bytes_written},
      {"blocks_written", t.blocks_written},
      {"evicted_blocks", t.evicted_blocks},
      {"demoted_blocks", t.demoted_blocks},
      {"rejected_blocks", t.rejected_blocks},
      {"admitted_blocks", t.admitted_blocks},
      {"admission_rejected_blocks", t.admission_rejected_blocks},
      {"forced_blocks", t.forced_blocks},
      {"errors", t.errors},
      {"corruptions", t.corruptions},
  };
  for (const auto& [k, v] : fields) o.Num(k, static_cast<double>(v));
  if (t.flop_alpha >= 0) {  // flop_aware tiers only
    o.Num("flop_alpha", t.flop_alpha);
    o.Num("alpha_tunings", static_cast<double>(t.alpha_tunings));
  }
  o.Close();
}

template <typename T, typename F>
void WriteList(JsonObject& o, std::string* out, std::string_view key, const std::vector<T>& v,
               F write) {
  o.Key(key) += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) *out += ',';
    write(out, v[i]);
  }
  *out += ']';
}

}  // namespace

std::string RenderStatsJson(const RuntimeStats& s) {
  std::string out;
  JsonObject o(&out);
  const std::pair<std::string_view, uint64_t> fields[] = {
      {"lookups", s.lookups},
      {"lookup_blocks", s.lookup_blocks},
      {"lookup_hit_blocks", s.lookup_hit_blocks},
      {"lookup_state_cut_blocks", s.lookup_state_cut_blocks},
      {"save_blocks", s.save_blocks},
      {"saved_blocks", s.saved_blocks},
      {"save_duplicates", s.save_duplicates},
      {"save_failures", s.save_failures},
      {"save_not_admitted", s.save_not_admitted},
      {"load_blocks", s.load_blocks},
      {"loaded_blocks", s.loaded_blocks},
      {"load_failures", s.load_failures},
      {"busy_rejections", s.busy_rejections},
      {"adopted_blocks", s.adopted_blocks},
      {"block_tokens", s.block_tokens},
      {"preemption_proposals", s.preemption_proposals},
  };
  for (const auto& [k, v] : fields) o.Num(k, static_cast<double>(v));
  WriteList(o, &out, "tiers", s.tiers, WriteTier);
  WriteList(o, &out, "moves", s.moves, [](std::string* out, const MoveStats& m) {
    JsonObject mo(out);
    mo.Str("from", m.from);
    mo.Str("to", m.to);
    mo.Num("blocks", static_cast<double>(m.blocks));
    mo.Num("bytes", static_cast<double>(m.bytes));
    mo.Close();
  });
  WriteList(o, &out, "errors", s.errors, [](std::string* out, const ErrorStats& e) {
    JsonObject eo(out);
    eo.Str("op", e.op);
    eo.Str("code", StatusCodeName(e.code));
    eo.Num("blocks", static_cast<double>(e.blocks));
    eo.Close();
  });
  o.Key("save_latency");
  WriteLatency(&out, s.save_latency);
  o.Key("load_latency");
  WriteLatency(&out, s.load_latency);
  o.Close();
  return out;
}

}  // namespace kvtier
