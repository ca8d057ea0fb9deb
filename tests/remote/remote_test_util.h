// Shared pieces of the remote tier tests: kvtier-memd processes kept for the
// whole test binary, and tier options pointing at them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kvtier/tier.h"
#include "tests/support/memd_server.h"

namespace kvtier::testing {

// The kvtier-memd processes FreshMemd shares across a test binary. They stop
// in the environment's TearDown, still inside RUN_ALL_TESTS, so a server that
// ended on its own during the last test using it fails the run (a static's
// destructor would run after the exit status is decided).
class SharedMemdEnvironment : public ::testing::Environment {
 public:
  static std::vector<std::unique_ptr<MemdProcess>>& procs() {
    static std::vector<std::unique_ptr<MemdProcess>> procs;
    return procs;
  }
  void TearDown() override { procs().clear(); }
};
inline ::testing::Environment* const kSharedMemdEnvironment =
    ::testing::AddGlobalTestEnvironment(new SharedMemdEnvironment);

// `n` kvtier-memd processes (the first n of one shared set), empty: started
// now, or restarted if an earlier call in this process started them. (A
// restart rebinds the same port, which a parallel test's outgoing connection
// may have taken meanwhile: only restart what must be emptied.)
inline std::vector<MemdProcess*> FreshMemd(size_t n) {
  std::vector<std::unique_ptr<MemdProcess>>& procs = SharedMemdEnvironment::procs();
  const size_t existing = std::min(n, procs.size());
  while (procs.size() < n) {
    auto p = MemdProcess::Start();
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return {};
    procs.push_back(std::move(p).value());
  }
  std::vector<MemdProcess*> out;
  for (size_t i = 0; i < n; ++i) {
    if (i < existing) {
      Status s = procs[i]->Restart();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    out.push_back(procs[i].get());
  }
  return out;
}

inline TierOptions RemoteOptions(const std::vector<MemdProcess*>& procs, uint64_t capacity_bytes) {
  TierOptions o;
  o.name = "remote";
  o.type = "remote";
  o.capacity_bytes = capacity_bytes;
  for (MemdProcess* p : procs) o.servers.push_back(p->endpoint());
  o.remote.secret_file = procs.empty() ? "" : procs[0]->secret_file();
  o.remote.op_timeout_ms = 2000;
  return o;
}

}  // namespace kvtier::testing
