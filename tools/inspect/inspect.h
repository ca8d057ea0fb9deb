// kvtier-inspect: the commands behind the CLI, one function each. Every
// command writes its result to `out` (a human table, or one JSON document
// with `json`) and its complaints to `err`, and returns the exit code.
//
// Exit codes, the same for every command:
//   0  done; the thing inspected is fine
//   1  the thing inspected is bad or unreachable: an invalid config, a trace
//      that cannot be read, no runtime answering on the socket, corrupt blocks
//   2  usage error, or a command this build does not include
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
  std::string socket;          // the runtime's admin socket
  uint32_t timeout_ms = 2000;  // per request
  uint32_t interval_ms = 1000; // top: between the two samples; watch: between refreshes
  uint64_t count = 0;          // watch: refreshes before exiting; 0 = until interrupted
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

// ---- offline stores (stores.cc) ----------------------------------------------
int RunNvme(const std::string& path, const std::string& action, bool read_only, const Output& o);
int RunRedis(const std::string& url, const std::string& action, const Output& o);

}  // namespace kvtier::inspect
