// A kvtier-memd server that stops answering (SIGSTOP: its sockets stay open,
// so connects still succeed and only the handshake hangs) costs the engine
// one timeout per connection, not one connect timeout per reconnect cycle:
// while the server is silent, a request with no ready connection fails at
// once, and the client reconnects in the background until it answers again.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/remote/remote_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/silent_reads.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{78};
constexpr uint64_t kBlock = 16 * 1024;

TEST(RemoteSilentServerTest, RequestsFailAtOnceWhileTheServerIsSilentThenItServesAgain) {
  auto procs = FreshMemd(1);
  ASSERT_EQ(procs.size(), 1u);
  const uint32_t timeout_ms = 300 * static_cast<uint32_t>(TimeScale());
  TierOptions o = RemoteOptions(procs, 64 * kBlock);
  o.remote.connections = 2;
  o.remote.op_timeout_ms = timeout_ms;
  o.remote.connect_timeout_ms = timeout_ms;
  o.remote.reconnect_backoff_ms = 20;
  o.remote.reconnect_backoff_max_ms = timeout_ms / 3;
  auto made = CreateTier(o, TierContext{kBlock});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Tier& tier = **made;
  const std::vector<std::byte> data = BlockBytes(TestKey(1), kBlock);
  std::vector<std::byte> out(kBlock);
  ReadOp r{TestKey(1), out};
  WriteAndReadOnEachConnection(tier, kNs, TestKey(1), data, r, 2);

  procs[0]->Pause();
  // Before, each reconnect cycle made a request wait on the connection
  // being made until its connect timeout. The two connections that were up
  // each hold one read to its timeout.
  ExpectFastFailuresWhileSilent(tier, kNs, r, timeout_ms, 2, "answered nothing");

  procs[0]->Resume();
  ExpectServesAgain(tier, kNs, r, data);
  tier.Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
