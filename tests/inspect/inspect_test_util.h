// A runtime put through a fixed, deterministic sequence of saves, a
// demotion, lookups and loads, so that every counter it reports has a known
// value; and a temporary directory for sockets and files.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvtier/runtime.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {

// mkdtemp under /tmp (short: Unix socket paths are limited to 107 bytes);
// removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Hub "host" of 4 blocks, lower tier "cold" (type host) of 8 blocks, 4096-byte
// blocks of 8 tokens, mover thread off, a ManualClock (so every latency is 0).
struct Scenario {
  EngineSetup engine;
  std::shared_ptr<ManualClock> clock;
  std::unique_ptr<Runtime> runtime;
};
Result<Scenario> OpenScenario(const std::string& admin_socket = "");

// Saves 4 chained blocks (twice: the second time all duplicates), runs the
// mover once (the leaf moves host -> cold), looks up 6 keys (4 hit), loads
// the 4 (one staged cold -> host) and loads 2 unknown keys (2 not_found).
void RunScenario(Scenario& s);

// Leaves a socket file at `path` that nobody listens on, as a process that
// was killed does. True when it was made.
bool LeaveStaleSocket(const std::string& path);

// Block size of the scenario's runtime.
inline constexpr uint64_t kScenarioBlockBytes = 4096;

}  // namespace kvtier::testing
