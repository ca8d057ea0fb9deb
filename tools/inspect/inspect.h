// kvtier-inspect: the commands behind the CLI, one function each. Every
// command writes its result to `out` (a human table, or one JSON document
// with `json`) and its complaints to `err`, and returns the exit code.
//
// Exit codes, the same for every command:
//   0  done; the thing inspected is fine
//   1  the thing inspected is bad or unreachable: an invalid config, a trace
//      that cannot be read, no runtime answering on the socket, corrupt blocks
//   2  usage error, a store a live process holds (nvme without --read-only),
//      or a command this build does not include
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kvtier::inspect {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBad = 1;
inline constexpr int kExitUsage = 2;

struct Output {
  std::ostream& out;
  std::ostream& err;
  bool json = false;
};

// ---- live runtime (live.cc) -------------------------------------------------
struct LiveFlags {
  std::string socket;           // the runtime's admin socket
  uint32_t timeout_ms = 2000;   // per request
  uint32_t interval_ms = 1000;  // top: between the two samples; watch: between refreshes
  uint64_t count = 0;           // watch: refreshes before exiting; 0 = until interrupted
};
int RunStats(const LiveFlags& flags, const Output& o);
int RunTiers(const LiveFlags& flags, const Output& o);
int RunTop(const LiveFlags& flags, const Output& o);
// Ends with 0 when the runtime goes away after at least one refresh (a
// replay that finished), 1 when it never answered.
int RunWatch(const LiveFlags& flags, const Output& o);

// ---- configuration (config_cmd.cc) ----------------------------------------
int RunConfigValidate(const std::string& file, const std::vector<std::string>& overrides,
                      const Output& o);
int RunConfigExplain(const std::string& file, const std::vector<std::string>& overrides,
                     const Output& o);

// ---- traces (trace_cmd.cc) --------------------------------------------------
int RunTrace(const std::string& file, uint32_t block_tokens, const Output& o);

// ---- offline stores (nvme_cmd.cc, redis_cmd.cc; stores.cc without them) ----
struct NvmeFlags {
  std::string path;        // the tier's data file or device
  std::string index;       // its RocksDB index; empty = path + ".index"
  std::string action;      // summary or verify
  bool read_only = false;  // skip the lock: read a store a live tier holds
};
// summary: regions, blocks, bytes, namespaces, and the index entries the
// tier would drop (stale, outside the geometry, overlapping, undecodable).
// verify: reads every indexed block and checks header and checksum; 1 when
// any is corrupt or the index holds entries the tier would discard as
// damage (all but stale ones). An index of another format version is
// refused with 1. A store a
// live tier holds (its data file is locked) is refused with 2 unless
// read_only.
int RunNvme(const NvmeFlags& flags, const Output& o);

struct RedisFlags {
  std::string url;                // redis://[[user]:password@]host[:port][/db]
  std::string action;             // summary
  std::string prefix = "kvtier";  // the tier's key_prefix
  uint64_t sample = 0;            // keys whose values are measured; 0 = all
  uint32_t timeout_ms = 2000;
};
// Blocks and bytes per namespace (SCAN MATCH, never KEYS); 1 when the
// server cannot be reached or a sampled value has no valid header. A key
// gone before its value is read (deleted, expired, evicted) is counted as
// vanished, a key SCAN returns twice once; neither is damage. With a sample,
// a namespace it missed is estimated from the sample's mean block.
int RunRedis(const RedisFlags& flags, const Output& o);

// What a build without the backend answers: exit 2.
int NotAvailable(const std::string& what, const Output& o);

}  // namespace kvtier::inspect
