#include "tools/bench/report.h"

#include <cinttypes>
#include <cstdarg>
#include <nlohmann/json.hpp>

namespace kvtier::bench {
namespace {

std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

double Ratio(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

double PerSecond(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

std::string FormatTiers(const std::vector<TierStats>& tiers) {
  std::string out =
      Printf("%-10s %-7s %10s %10s %9s %9s %10s %10s %8s %8s\n", "tier", "type", "capacity", "used",
             "blocks", "hit_blks", "read", "written", "evicted", "demoted");
  for (const TierStats& t : tiers) {
    out += Printf("%-10s %-7s %10s %10s %9" PRIu64 " %9" PRIu64 " %10s %10s %8" PRIu64 " %8" PRIu64
                  "\n",
                  t.name.c_str(), t.type.c_str(), FormatBytes(t.capacity_bytes).c_str(),
                  FormatBytes(t.used_bytes).c_str(), t.blocks, t.hit_blocks,
                  FormatBytes(t.bytes_read).c_str(), FormatBytes(t.bytes_written).c_str(),
                  t.evicted_blocks, t.demoted_blocks);
  }
  return out;
}

}  // namespace

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0 || bytes == static_cast<double>(static_cast<uint64_t>(bytes))) {
    return Printf("%.0f%s", bytes, kUnits[unit]);
  }
  return Printf("%.1f%s", bytes, kUnits[unit]);
}

std::string FormatReplayReport(const ReplayReport& r) {
  const InfiniteCacheStats& inf = r.infinite;
  std::string out;
  out += "trace:          " + r.trace_source + "\n";
  out += "config:         " + r.config_source + "\n";
  out += Printf("requests:       %" PRIu64 ", %" PRIu64 " reused a prefix (skipped %" PRIu64
                ", %" PRIu64 " blocks, larger than the engine pool)\n",
                r.requests, r.hit_requests, r.skipped_requests, r.skipped_blocks);
  out += Printf("blocks:         %" PRIu64 " of %s (%" PRIu64 " unique)\n", r.blocks,
                FormatBytes(r.block_bytes).c_str(), inf.unique_blocks);
  if (r.renamed_blocks != 0) {
    out += Printf("                %" PRIu64
                  " of the unique blocks under an id the trace used for another block "
                  "(another prefix or length), counted apart\n",
                  r.renamed_blocks);
  }
  out += Printf("block hits:     %" PRIu64 " (%.2f%%), infinite cache %" PRIu64 " (%.2f%%)\n",
                r.block_hits, 100 * Ratio(r.block_hits, r.blocks), inf.hit_blocks,
                100 * Ratio(inf.hit_blocks, inf.blocks));
  out += Printf("tokens:         %" PRIu64 "\n", r.tokens);
  out += Printf("token hits:     %" PRIu64 " (%.2f%%), infinite cache %" PRIu64 " (%.2f%%)\n",
                r.token_hits, 100 * Ratio(r.token_hits, r.tokens), inf.hit_tokens,
                100 * Ratio(inf.hit_tokens, inf.tokens));
  if (r.interrupted_by != 0) {
    out += Printf("interrupted:    by signal %d after %" PRIu64 " of %" PRIu64
                  " requests; the figures cover those\n",
                  r.interrupted_by, r.requests, r.planned_requests);
  }
  if (r.restart_at != 0) {
    out += Printf(
        "after restart:  %" PRIu64 " requests after the restart at request %" PRIu64
        ": block hits %" PRIu64 " of %" PRIu64 " (%.2f%%), token hits %.2f%%, %" PRIu64
        " blocks adopted\n",
        r.requests_after_restart, r.restart_at, r.block_hits_after_restart, r.blocks_after_restart,
        100 * Ratio(r.block_hits_after_restart, r.blocks_after_restart),
        100 * Ratio(r.token_hits_after_restart, r.tokens_after_restart), r.runtime.adopted_blocks);
  }
  if (r.state_blocks > 0) {
    out += Printf("checkpoints:    %" PRIu64 " saved of %" PRIu64 " offered (%" PRIu64
                  " with their block not stored), %" PRIu64 " resumed from, %" PRIu64
                  " failed to load, %u blocks each\n",
                  r.checkpoints_saved, r.checkpoints_offered, r.checkpoints_unstored,
                  r.state_resumes, r.state_load_failures, r.state_blocks);
  }
  out += Printf("failures:       verify %" PRIu64 ", save %" PRIu64 ", load %" PRIu64
                ", lookup %" PRIu64 "\n",
                r.verify_failures, r.save_failures, r.load_failures, r.lookup_failures);
  out += Printf("elapsed:        %.3f s, %.1f requests/s\n", r.elapsed_s,
                PerSecond(static_cast<double>(r.requests), r.elapsed_s));
  // Rates over the time spent in Load (Save) and its wait only, not over the
  // whole loop, which also hashes keys, fills and checks block contents.
  out += Printf("loaded:         %s (%.3f GB/s over %.3f s in Load+Wait)\n",
                FormatBytes(r.bytes_loaded).c_str(),
                PerSecond(static_cast<double>(r.bytes_loaded) / 1e9, r.load_s), r.load_s);
  out += Printf("saved:          %s (%.3f GB/s over %.3f s in Save+Wait)\n",
                FormatBytes(r.bytes_saved).c_str(),
                PerSecond(static_cast<double>(r.bytes_saved) / 1e9, r.save_s), r.save_s);
  if (r.state_blocks > 0) {
    out +=
        Printf("of which state: %s loaded, %s saved\n", FormatBytes(r.state_bytes_loaded).c_str(),
               FormatBytes(r.state_bytes_saved).c_str());
  }
  out += FormatTiers(r.runtime.tiers);
  for (const std::string& w : r.warnings) out += "warning: " + w + "\n";
  return out;
}

std::string ReplayReportJson(const ReplayReport& r) {
  nlohmann::ordered_json j;
  j["trace"] = r.trace_source;
  j["renamed_blocks"] = r.renamed_blocks;
  j["config"] = r.config_source;
  j["requests"] = r.requests;
  j["skipped_requests"] = r.skipped_requests;
  j["skipped_blocks"] = r.skipped_blocks;
  j["hit_requests"] = r.hit_requests;
  j["blocks"] = r.blocks;
  j["block_hits"] = r.block_hits;
  j["lookup_hits"] = r.lookup_hits;
  j["tokens"] = r.tokens;
  j["token_hits"] = r.token_hits;
  j["verify_failures"] = r.verify_failures;
  j["save_failures"] = r.save_failures;
  j["load_failures"] = r.load_failures;
  j["lookup_failures"] = r.lookup_failures;
  j["restart_at"] = r.restart_at;
  j["interrupted_by"] = r.interrupted_by;
  j["planned_requests"] = r.planned_requests;
  j["requests_after_restart"] = r.requests_after_restart;
  j["blocks_after_restart"] = r.blocks_after_restart;
  j["block_hits_after_restart"] = r.block_hits_after_restart;
  j["tokens_after_restart"] = r.tokens_after_restart;
  j["token_hits_after_restart"] = r.token_hits_after_restart;
  j["state_blocks"] = r.state_blocks;
  j["checkpoints_offered"] = r.checkpoints_offered;
  j["checkpoints_saved"] = r.checkpoints_saved;
  j["checkpoints_unstored"] = r.checkpoints_unstored;
  j["state_resumes"] = r.state_resumes;
  j["state_load_failures"] = r.state_load_failures;
  j["state_bytes_loaded"] = r.state_bytes_loaded;
  j["state_bytes_saved"] = r.state_bytes_saved;
  j["infinite_cache_block_hits"] = r.infinite.hit_blocks;
  j["infinite_cache_token_hits"] = r.infinite.hit_tokens;
  j["unique_blocks"] = r.infinite.unique_blocks;
  j["block_bytes"] = r.block_bytes;
  j["bytes_loaded"] = r.bytes_loaded;
  j["bytes_saved"] = r.bytes_saved;
  j["elapsed_s"] = r.elapsed_s;
  j["load_s"] = r.load_s;
  j["save_s"] = r.save_s;
  j["warnings"] = r.warnings;
  nlohmann::ordered_json tiers = nlohmann::ordered_json::array();
  for (const TierStats& t : r.runtime.tiers) {
    tiers.push_back({{"name", t.name},
                     {"type", t.type},
                     {"capacity_bytes", t.capacity_bytes},
                     {"used_bytes", t.used_bytes},
                     {"blocks", t.blocks},
                     {"hit_blocks", t.hit_blocks},
                     {"bytes_read", t.bytes_read},
                     {"bytes_written", t.bytes_written},
                     {"evicted_blocks", t.evicted_blocks},
                     {"demoted_blocks", t.demoted_blocks},
                     {"rejected_blocks", t.rejected_blocks},
                     {"errors", t.errors},
                     {"corruptions", t.corruptions}});
  }
  j["tiers"] = std::move(tiers);
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

int ReplayExitCode(const ReplayReport& r) {
  if (r.verify_failures > 0) return 1;
  if (r.interrupted_by != 0) return 128 + r.interrupted_by;  // as the shell reports a signal
  if (r.load_failures > 0 || r.save_failures > 0 || r.lookup_failures > 0) return 3;
  return 0;
}

std::string FormatHostBench(const std::vector<HostBenchRow>& rows) {
  std::string out =
      "host tier (Write then Read of each batch, one thread) vs memcpy (the same two copies\n"
      "per block between the same buffers); MB/s of block bytes moved, best round of each;\n"
      "depth = blocks per tier batch, ratio = tier / memcpy\n";
  out += Printf("%10s %6s %8s %12s %12s %7s\n", "block", "depth", "ws_blks", "tier MB/s",
                "memcpy MB/s", "ratio");
  for (const HostBenchRow& row : rows) {
    out +=
        Printf("%10s %6u %8" PRIu64 " %12.0f %12.0f %7.2f\n", FormatBytes(row.block_bytes).c_str(),
               row.queue_depth, row.working_set_blocks, row.tier_mb_s, row.memcpy_mb_s, row.ratio);
  }
  return out;
}

std::string HostBenchJson(const std::vector<HostBenchRow>& rows) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const HostBenchRow& row : rows) {
    list.push_back({{"block_bytes", row.block_bytes},
                    {"queue_depth", row.queue_depth},
                    {"working_set_blocks", row.working_set_blocks},
                    {"tier_mb_s", row.tier_mb_s},
                    {"memcpy_mb_s", row.memcpy_mb_s},
                    {"ratio", row.ratio}});
  }
  nlohmann::ordered_json j;
  j["rows"] = std::move(list);
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace kvtier::bench
