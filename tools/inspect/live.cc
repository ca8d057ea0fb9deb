// stats, tiers, top and watch: views of a running runtime's /stats document.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "tools/inspect/admin_client.h"
#include "tools/inspect/inspect.h"
#include "tools/inspect/json_text.h"
#include "tools/inspect/table.h"

namespace kvtier::inspect {
namespace {

using nlohmann::json;

bool ArrayOfObjects(const json& j) {
  return j.is_array() &&
         std::all_of(j.begin(), j.end(), [](const json& x) { return x.is_object(); });
}

// The shape the views below rely on; a field missing or of another type
// inside a tier, move or error reads as 0 or "".
Result<json> FetchStats(const LiveFlags& f) {
  KVTIER_ASSIGN_OR_RETURN(std::string body,
                          FetchAdmin(f.socket, "/stats", std::chrono::milliseconds(f.timeout_ms)));
  // Nested deeper than a stats document ever is, it is refused while
  // parsing: printing it back would recurse once per level.
  constexpr int kMaxDepth = 16;
  bool too_deep = false;
  auto depth_check = [&](int depth, json::parse_event_t, json&) {
    too_deep = too_deep || depth > kMaxDepth;
    return !too_deep;
  };
  json doc = json::parse(body, depth_check, /*allow_exceptions=*/false);
  const std::string what = "admin socket " + f.socket + ": /stats is not a stats document";
  if (too_deep) return Status::IOError(what + " (nested too deep)");
  if (doc.is_discarded() || !doc.is_object()) return Status::IOError(what);
  if (!doc.contains("tiers") || !ArrayOfObjects(doc["tiers"])) {
    return Status::IOError(what + " ('tiers' must be an array of objects)");
  }
  for (const char* list : {"moves", "errors"}) {
    if (doc.contains(list) && !ArrayOfObjects(doc[list])) {
      return Status::IOError(what + " ('" + list + "' must be an array of objects)");
    }
  }
  for (const char* latency : {"save_latency", "load_latency"}) {
    if (doc.contains(latency) && !doc[latency].is_object()) {
      return Status::IOError(what + " ('" + latency + "' must be an object)");
    }
  }
  return doc;
}

// `j[key]`, or an empty array when absent.
const json& Field(const json& j, const char* key) {
  static const json kEmpty = json::array();
  auto it = j.find(key);
  return it != j.end() ? *it : kEmpty;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// `j[key]` when it is an array, else an empty one.
const json& List(const json& j, const char* key) {
  static const json kEmpty = json::array();
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

double NumAt(const json& list, size_t i) {
  return list.is_array() && i < list.size() && list[i].is_number() ? list[i].get<double>() : 0.0;
}

int Fail(const Output& o, const Status& s) {
  o.err << "kvtier-inspect: " << s.ToString() << "\n";
  return kExitBad;
}

double Num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// A count as the document gives it, clamped to what a counter can be: a
// negative or out-of-range double cast to uint64 is undefined.
std::string Int(double v) {
  if (!(v > 0)) return "0";
  if (v >= 18446744073709551615.0) return "18446744073709551615";
  return std::to_string(static_cast<uint64_t>(v));
}

// The mean and the bucket bound holding quantile q of a latency histogram.
std::string LatencySummary(const json& h) {
  const double count = h.is_object() ? Num(h, "count") : 0.0;
  if (count == 0) return "no requests";
  const json& bounds = List(h, "upper_bounds_s");
  const json& counts = List(h, "bucket_counts");
  auto quantile = [&](double q) -> std::string {
    double seen = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      seen += NumAt(counts, i);
      if (seen < q * count) continue;
      if (i < bounds.size()) return "<= " + Fixed(NumAt(bounds, i) * 1e3, 3) + " ms";
      if (!bounds.empty()) return "> " + Fixed(NumAt(bounds, bounds.size() - 1) * 1e3, 3) + " ms";
      break;
    }
    return "?";
  };
  return Int(count) + " requests, mean " + Fixed(Num(h, "sum_s") / count * 1e3, 3) +
         " ms, p50 " + quantile(0.5) + ", p99 " + quantile(0.99);
}

std::string TiersTable(const json& doc) {
  Table t({"tier", "type", "capacity", "used", "used%", "blocks", "unclaimed", "hits", "read",
           "written", "evicted", "demoted", "admitted", "refused", "errors", "corrupt"});
  for (const json& x : Field(doc, "tiers")) {
    t.Row({Str(x, "name"), Str(x, "type"), Bytes(Num(x, "capacity_bytes")),
           Bytes(Num(x, "used_bytes")), Percent(Num(x, "used_bytes"), Num(x, "capacity_bytes")),
           Int(Num(x, "blocks")), Int(Num(x, "unclaimed_blocks")), Int(Num(x, "hit_blocks")),
           Bytes(Num(x, "bytes_read")), Bytes(Num(x, "bytes_written")),
           Int(Num(x, "evicted_blocks")), Int(Num(x, "demoted_blocks")),
           Int(Num(x, "admitted_blocks")), Int(Num(x, "admission_rejected_blocks")),
           Int(Num(x, "errors")), Int(Num(x, "corruptions"))});
  }
  return t.Render();
}

std::string StatsText(const json& d) {
  Table t({"counter", "value"});
  const double asked = Num(d, "lookup_blocks"), hits = Num(d, "lookup_hit_blocks");
  t.Row({"lookups", Int(Num(d, "lookups"))});
  t.Row({"lookup blocks", Int(asked)});
  t.Row({"hit blocks", Int(hits) + " (" + Percent(hits, asked) + ")"});
  t.Row({"miss blocks", Int(asked - hits)});
  if (const double bt = Num(d, "block_tokens"); bt > 0) {
    t.Row({"hit tokens", Int(hits * bt)});
    t.Row({"miss tokens", Int((asked - hits) * bt)});
  }
  t.Row({"save blocks", Int(Num(d, "save_blocks"))});
  t.Row({"saved blocks", Int(Num(d, "saved_blocks"))});
  t.Row({"save duplicates", Int(Num(d, "save_duplicates"))});
  t.Row({"save failures", Int(Num(d, "save_failures"))});
  t.Row({"save not admitted", Int(Num(d, "save_not_admitted"))});
  t.Row({"load blocks", Int(Num(d, "load_blocks"))});
  t.Row({"loaded blocks", Int(Num(d, "loaded_blocks"))});
  t.Row({"load failures", Int(Num(d, "load_failures"))});
  t.Row({"busy rejections", Int(Num(d, "busy_rejections"))});
  t.Row({"adopted blocks", Int(Num(d, "adopted_blocks"))});
  t.Row({"preemption proposals", Int(Num(d, "preemption_proposals"))});
  double corrupt = 0;
  for (const json& x : Field(d, "tiers")) corrupt += Num(x, "corruptions");
  t.Row({"corruptions", Int(corrupt)});
  std::string out = t.Render();
  out += "\nsave latency: " + LatencySummary(Field(d, "save_latency")) + "\n";
  out += "load latency: " + LatencySummary(Field(d, "load_latency")) + "\n\n";
  Table moves({"from", "to", "blocks", "bytes"});
  for (const json& m : Field(d, "moves")) {
    moves.Row({Str(m, "from"), Str(m, "to"), Int(Num(m, "blocks")), Bytes(Num(m, "bytes"))});
  }
  out += moves.Render();
  if (!Field(d, "errors").empty()) {
    Table errors({"op", "code", "blocks"});
    for (const json& e : Field(d, "errors")) {
      errors.Row({Str(e, "op"), Str(e, "code"), Int(Num(e, "blocks"))});
    }
    out += "\n" + errors.Render();
  }
  return out + "\n" + TiersTable(d);
}

// Per-second rates between two snapshots.
json Rates(const json& a, const json& b, double seconds) {
  auto rate = [&](const json& x, const json& y, const char* k) {
    return seconds > 0 ? (Num(y, k) - Num(x, k)) / seconds : 0.0;
  };
  json out = {{"interval_s", seconds},
              {"lookups_per_s", rate(a, b, "lookups")},
              {"lookup_blocks_per_s", rate(a, b, "lookup_blocks")},
              {"hit_blocks_per_s", rate(a, b, "lookup_hit_blocks")},
              {"saved_blocks_per_s", rate(a, b, "saved_blocks")},
              {"loaded_blocks_per_s", rate(a, b, "loaded_blocks")},
              {"tiers", json::array()},
              {"moves", json::array()}};
  const json &a_tiers = Field(a, "tiers"), &b_tiers = Field(b, "tiers");
  for (size_t i = 0; i < b_tiers.size() && i < a_tiers.size(); ++i) {
    const json &x = a_tiers[i], &y = b_tiers[i];
    out["tiers"].push_back({{"name", Str(y, "name")},
                            {"used_bytes", Num(y, "used_bytes")},
                            {"hit_blocks_per_s", rate(x, y, "hit_blocks")},
                            {"read_bytes_per_s", rate(x, y, "bytes_read")},
                            {"written_bytes_per_s", rate(x, y, "bytes_written")},
                            {"evicted_blocks_per_s", rate(x, y, "evicted_blocks")}});
  }
  const json &a_moves = Field(a, "moves"), &b_moves = Field(b, "moves");
  for (size_t i = 0; i < b_moves.size() && i < a_moves.size(); ++i) {
    const json &x = a_moves[i], &y = b_moves[i];
    out["moves"].push_back({{"from", Str(y, "from")},
                            {"to", Str(y, "to")},
                            {"blocks_per_s", rate(x, y, "blocks")},
                            {"bytes_per_s", rate(x, y, "bytes")}});
  }
  auto by_bytes = [](const char* key) {
    return [key](const json& l, const json& r) { return Num(l, key) > Num(r, key); };
  };
  std::stable_sort(out["moves"].begin(), out["moves"].end(), by_bytes("bytes_per_s"));
  std::stable_sort(out["tiers"].begin(), out["tiers"].end(), by_bytes("read_bytes_per_s"));
  return out;
}

std::string RatesText(const json& r) {
  std::string out = "over " + Fixed(Num(r, "interval_s"), 2) + " s: " +
                    Fixed(Num(r, "lookups_per_s"), 1) + " lookups/s, " +
                    Fixed(Num(r, "hit_blocks_per_s"), 1) + " hit blocks/s of " +
                    Fixed(Num(r, "lookup_blocks_per_s"), 1) + ", " +
                    Fixed(Num(r, "saved_blocks_per_s"), 1) + " saved blocks/s, " +
                    Fixed(Num(r, "loaded_blocks_per_s"), 1) + " loaded blocks/s\n\n";
  Table moves({"path", "blocks/s", "bytes/s"});
  for (const json& m : r["moves"]) {
    moves.Row({Str(m, "from") + " -> " + Str(m, "to"), Fixed(Num(m, "blocks_per_s"), 1),
               Bytes(Num(m, "bytes_per_s")) + "/s"});
  }
  Table tiers({"tier", "used", "hits/s", "read/s", "written/s", "evicted/s"});
  for (const json& t : r["tiers"]) {
    tiers.Row({Str(t, "name"), Bytes(Num(t, "used_bytes")), Fixed(Num(t, "hit_blocks_per_s"), 1),
               Bytes(Num(t, "read_bytes_per_s")) + "/s",
               Bytes(Num(t, "written_bytes_per_s")) + "/s",
               Fixed(Num(t, "evicted_blocks_per_s"), 1)});
  }
  return out + moves.Render() + "\n" + tiers.Render();
}

}  // namespace

int RunStats(const LiveFlags& f, const Output& o) {
  Result<json> doc = FetchStats(f);
  if (!doc.ok()) return Fail(o, doc.status());
  o.out << (o.json ? JsonText(*doc) + "\n" : StatsText(*doc));
  return kExitOk;
}

int RunTiers(const LiveFlags& f, const Output& o) {
  Result<json> doc = FetchStats(f);
  if (!doc.ok()) return Fail(o, doc.status());
  o.out << (o.json ? JsonText({{"tiers", (*doc)["tiers"]}}) + "\n" : TiersTable(*doc));
  return kExitOk;
}

int RunTop(const LiveFlags& f, const Output& o) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<json> a = FetchStats(f);
  if (!a.ok()) return Fail(o, a.status());
  std::this_thread::sleep_for(std::chrono::milliseconds(f.interval_ms));
  Result<json> b = FetchStats(f);
  if (!b.ok()) return Fail(o, b.status());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json r = Rates(*a, *b, s);
  o.out << (o.json ? JsonText(r) + "\n" : RatesText(r));
  return kExitOk;
}

// How long watch waits for a runtime that shut down to open again (a
// restart) before it ends as the run did.
constexpr std::chrono::seconds kReopenWait{2};

int RunWatch(const LiveFlags& f, const Output& o) {
  const bool tty = !o.json && &o.out == &std::cout && isatty(STDOUT_FILENO);
  auto next = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> gone_since;
  uint64_t shown = 0;
  for (uint64_t i = 0; f.count == 0 || i < f.count; ++i) {
    if (i > 0) std::this_thread::sleep_until(next);
    next += std::chrono::milliseconds(f.interval_ms);
    Result<json> doc = FetchStats(f);
    if (!doc.ok() && shown > 0 && doc.status().code() == StatusCode::kUnavailable) {
      struct stat st {};
      if (lstat(f.socket.c_str(), &st) == 0) {
        // A runtime that shuts down removes its socket file; one killed or
        // crashed leaves it behind.
        o.err << "kvtier-inspect watch: the runtime at " << f.socket << " stopped answering after "
              << shown << " refreshes and left its socket file: it ended without shutting down\n";
        return kExitBad;
      }
      // Shut down: the end of a run, or a restart that opens it again soon.
      const auto now = std::chrono::steady_clock::now();
      if (!gone_since) gone_since = now;
      if (now - *gone_since < kReopenWait) continue;
      o.err << "kvtier-inspect watch: the runtime at " << f.socket << " shut down after " << shown
            << " refreshes\n";
      return kExitOk;  // following a run to its end is a success
    }
    if (!doc.ok()) return Fail(o, doc.status());
    gone_since.reset();
    ++shown;
    if (!o.out) return Fail(o, Status::IOError("cannot write to the output"));
    if (o.json) {
      o.out << JsonText(*doc) << std::endl;  // one JSON document per line
      continue;
    }
    if (tty) o.out << "\033[H\033[2J";  // redraw in place
    const double asked = Num(*doc, "lookup_blocks"), hits = Num(*doc, "lookup_hit_blocks");
    o.out << "kvtier runtime at " << f.socket << " (refresh " << shown << ")\n"
          << "lookups " << Int(Num(*doc, "lookups")) << ", hit blocks " << Int(hits) << " of "
          << Int(asked) << " (" << Percent(hits, asked) << "), saved "
          << Int(Num(*doc, "saved_blocks")) << ", loaded " << Int(Num(*doc, "loaded_blocks"))
          << "\n\n"
          << TiersTable(*doc) << std::endl;
  }
  return kExitOk;
}

}  // namespace kvtier::inspect
