// Output of kvtier-bench: human-readable tables and one-object JSON.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tools/bench/host_bench.h"
#include "tools/bench/replay.h"

namespace kvtier::bench {

// Multi-line summary: totals, hit rates against the infinite-cache
// reference, failures, throughput, then one row per tier.
std::string FormatReplayReport(const ReplayReport& report);

// One JSON object (no trailing newline). Keys: requests, skipped_requests,
// blocks, block_hits, lookup_hits, tokens, token_hits, verify_failures,
// save_failures, load_failures, lookup_failures, infinite_cache_block_hits,
// infinite_cache_token_hits, unique_blocks, block_bytes, bytes_loaded,
// bytes_saved, elapsed_s, load_s, save_s, trace, config, warnings, tiers: [{name, type,
// capacity_bytes, used_bytes, blocks, hit_blocks, bytes_read, bytes_written,
// evicted_blocks, demoted_blocks, rejected_blocks, errors, corruptions}].
std::string ReplayReportJson(const ReplayReport& report);

// Exit status of `kvtier-bench replay` for a finished replay: 0 when every
// block was loaded, saved and looked up without error; 1 when a loaded block
// had wrong bytes (whatever else failed); 3 when there were no wrong bytes
// but some load, save or lookup failed (the rates and hit counts then
// include those failures); 128 + the signal when one stopped it early (130
// for SIGINT, 143 for SIGTERM) and nothing was wrong. 2, usage and setup
// errors, never comes from here.
int ReplayExitCode(const ReplayReport& report);

std::string FormatHostBench(const std::vector<HostBenchRow>& rows);
// {"rows": [{block_bytes, queue_depth, tier_mb_s, memcpy_mb_s, ratio}]}
std::string HostBenchJson(const std::vector<HostBenchRow>& rows);

// "64KiB", "1.5MiB", "512B".
std::string FormatBytes(double bytes);

}  // namespace kvtier::bench
