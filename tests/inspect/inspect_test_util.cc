#include "tests/inspect/inspect_test_util.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

namespace kvtier::testing {

TempDir::TempDir() {
  char tmpl[] = "/tmp/kvtier-inspect-XXXXXX";
  if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

Result<Scenario> OpenScenario(const std::string& admin_socket) {
  Scenario s;
  s.engine = MakeEngine(64);
  if (!s.engine.engine) return Status::Internal("no copy engine");
  RuntimeOptions o = MakeOptions(s.engine.layout.BlockBytes(), 4);
  o.tiers.push_back(LowerHostTier("cold", s.engine.layout.BlockBytes(), 8));
  s.clock = std::make_shared<ManualClock>();
  o.clock = s.clock;
  o.block_tokens = 8;
  o.admin_socket = admin_socket;
  KVTIER_ASSIGN_OR_RETURN(s.runtime, Runtime::Open(std::move(o), s.engine.engine));
  return s;
}

void RunScenario(Scenario& s) {
  SimEngine sim(s.runtime.get(), s.engine.engine.get());
  const std::vector<BlockKey> keys = ChainKeys({1, 2, 3, 4});
  sim.Prefill(keys, 0);
  EXPECT_EQ(sim.SaveFrom(keys, 0, 0).ok_count(), 4u);
  EXPECT_EQ(sim.SaveFrom(keys, 0, 0).ok_count(), 4u);  // duplicates
  auto moved = s.runtime->TEST_RunMoverOnce();
  EXPECT_TRUE(moved.ok() && *moved == 1);
  const std::vector<BlockKey> longer = ChainKeys({1, 2, 3, 4, 5, 6});
  auto hit = s.runtime->Lookup(kTestNs, longer);
  EXPECT_TRUE(hit.ok() && hit->hit_blocks == 4);
  EXPECT_EQ(sim.Load(keys, 8).ok_count(), 4u);
  const std::vector<BlockKey> unknown = ChainKeys({7, 8});
  EXPECT_EQ(sim.Load(unknown, 12).ok_count(), 0u);
}

bool LeaveStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), std::min(path.size(), sizeof(addr.sun_path) - 1));
  const bool bound = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return bound;
}

}  // namespace kvtier::testing
