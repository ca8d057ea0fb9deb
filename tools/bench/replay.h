// Trace replay: drives a Runtime the way a serving engine would, one request
// at a time, and checks every loaded byte.
//
// Per request: chain the ids of the trace's full blocks into keys (as an
// engine, which hashes no partial block: a prompt's partial last block is
// always computed, and the infinite-cache reference counts the same way),
// LookupAndPin, load the hits into blocks of a simulated engine pool
// (HostCopyEngine), verify them against FillBlockContent, "prefill" the rest,
// save the rest, release. The replay is closed-loop (as fast as possible;
// trace timestamps are ignored).
//
// Hybrid models (runtime.state_blocks > 0): the engine resumes only where the
// lookup found a state checkpoint (LookupAndPin cuts there), loads it with
// LoadState and checks it byte for byte too (a failed or wrong part means
// recomputing the whole prompt), and offers a checkpoint at every new
// block's boundary after the save; the hub's admission decides which to keep
// (`always`: every block, `marconi`: branch points and tails).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/completion.h"
#include "kvtier/config.h"
#include "kvtier/runtime.h"
#include "kvtier/status.h"
#include "tools/bench/synthetic.h"
#include "tools/bench/trace.h"

namespace kvtier::bench {

struct ReplayOptions {
  std::string config_path;                    // YAML config (LoadConfigFile)
  std::vector<std::string> overrides;         // "dotted.path=value" applied on top
  std::string trace_path;                     // Mooncake JSONL; ignored when `synthetic` is set
  std::optional<SyntheticOptions> synthetic;  // generate the trace instead
  uint64_t limit = 0;                         // replay at most this many requests; 0 = all
  uint64_t timeout_ms = 1000;                 // deadline of each Load; at most kMaxReplayTimeoutMs
  // After this many replayed requests the runtime is shut down and opened
  // again from the same config (a restart: what persistent tiers kept, and
  // mover.shutdown_writeback_ms wrote, is found again); 0 = never. It must
  // come before the last request replayed.
  uint64_t restart_at = 0;
  // Called after each request with (done, total); may be empty.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // When it holds a signal number (SIGINT, SIGTERM: set by a handler), the
  // replay stops after the request in progress and ends as at the last one:
  // the runtime shuts down as configured, and the report covers what ran.
  const std::atomic<int>* interrupt = nullptr;
  // InvalidArgument when timeout_ms is above kMaxReplayTimeoutMs.
  Status Validate() const;
};

inline constexpr uint64_t kMaxReplayTimeoutMs = 24ull * 3600 * 1000;  // one day

struct ReplayReport {
  std::string trace_source;
  std::string config_source;
  uint64_t renamed_blocks = 0;  // Trace::renamed_blocks
  uint64_t block_bytes = 0;
  uint32_t block_tokens = 0;
  uint64_t requests = 0;          // replayed
  uint64_t skipped_requests = 0;  // larger than the engine pool; not replayed
  uint64_t skipped_blocks = 0;
  uint64_t hit_requests = 0;  // replayed requests that reused a prefix (a block hit)
  uint64_t blocks = 0;       // of the trace, the partial last ones too
  uint64_t lookup_hits = 0;  // leading blocks LookupAndPin found
  // Leading blocks loaded OK and verified: the prefix an engine could reuse.
  uint64_t block_hits = 0;
  uint64_t tokens = 0;
  uint64_t token_hits = 0;
  // Loaded OK but with wrong bytes; every block that loaded OK is checked,
  // past the first failure of a request too.
  uint64_t verify_failures = 0;
  uint64_t load_failures = 0;    // Load results other than OK
  uint64_t save_failures = 0;    // Save results other than OK
  uint64_t lookup_failures = 0;  // LookupAndPin errors (treated as misses)
  uint64_t bytes_loaded = 0;     // blocks that loaded OK and verified
  uint64_t bytes_saved = 0;      // blocks saved OK
  double elapsed_s = 0;          // the whole replay loop
  double load_s = 0;             // inside Load / LoadState and their Wait, summed
  double save_s = 0;             // inside Save / SaveState and their Wait, summed
  // Hybrid models only (state_blocks > 0); state parts also count in
  // verify_failures, load_failures and save_failures.
  uint32_t state_blocks = 0;          // engine blocks one checkpoint takes
  // SaveState calls: one per block past where the request resumed (those
  // stored already, beyond a lookup's cut, are offered again: a no-op).
  uint64_t checkpoints_offered = 0;
  uint64_t checkpoints_saved = 0;  // stored whole by them (admission let them in)
  // Their block was not stored (refused by admission, or evicted since its
  // save): every part answered InvalidArgument. A part failing otherwise
  // counts in save_failures.
  uint64_t checkpoints_unstored = 0;
  uint64_t state_resumes = 0;         // hits whose checkpoint loaded OK and verified
  // Requests whose KV prefix loaded and verified whole but whose checkpoint
  // did not: nothing to resume from, so they recomputed the whole prompt.
  uint64_t state_load_failures = 0;
  uint64_t state_bytes_loaded = 0;    // part of bytes_loaded
  uint64_t state_bytes_saved = 0;     // part of bytes_saved
  // With ReplayOptions::restart_at: the requests after the restart, their
  // blocks and tokens, and the hits among them (the figures above count them too).
  uint64_t restart_at = 0;
  uint64_t requests_after_restart = 0;
  uint64_t blocks_after_restart = 0;
  uint64_t block_hits_after_restart = 0;
  uint64_t tokens_after_restart = 0;
  uint64_t token_hits_after_restart = 0;
  // The signal that stopped the replay early (ReplayOptions::interrupt), and
  // how many requests it would have replayed; 0 when it ran to the end.
  int interrupted_by = 0;
  uint64_t planned_requests = 0;
  InfiniteCacheStats infinite;  // over the replayed requests only
  RuntimeStats runtime;         // at the end of the replay (of the runtime after a restart)
  std::vector<std::string> warnings;
};

// How the results of one Load of n blocks count: every block that loaded OK
// is checked with `verify(i)` (true: right bytes).
struct LoadTally {
  size_t leading_hits = 0;  // blocks before the first load or verify failure
  uint64_t verified = 0;    // loaded OK with the right bytes, anywhere
  uint64_t load_failures = 0;
  uint64_t verify_failures = 0;
};
// REQUIRES: load.Poll().
LoadTally TallyLoad(const Completion& load, const std::function<bool(size_t i)>& verify);

// Replays `trace` against a Runtime opened from `config`. Uses `options`'
// limit, timeout_ms and progress; its config and trace fields are ignored.
// Errors only when `options` are invalid or the runtime cannot be set up;
// per-block failures are counted in the report.
Result<ReplayReport> ReplayTrace(const KvtierConfig& config, const Trace& trace,
                                 const ReplayOptions& options);

// Loads the config and the trace (or generates it) named by `options`, then
// ReplayTrace. InvalidArgument / NotFound for a bad config or trace.
Result<ReplayReport> RunReplay(const ReplayOptions& options);

}  // namespace kvtier::bench
