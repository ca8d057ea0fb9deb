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
  WriteOp w{TestKey(1), data};
  ASSERT_TRUE(tier.Write(kNs, std::span(&w, 1)).Wait().ok());
  std::vector<std::byte> out(kBlock);
  ReadOp r{TestKey(1), out};
  // Both connections are up before the server goes silent.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(tier.Read(kNs, std::span(&r, 1)).Wait().ok());

  procs[0]->Pause();
  // Long enough for several reconnect cycles (a connect timeout plus a
  // backoff each). Before, each cycle made a request wait on the
  // connection being made until its connect timeout.
  const auto window = std::chrono::milliseconds(timeout_ms * 8);
  const auto slow = std::chrono::milliseconds(timeout_ms / 3);
  const auto start = std::chrono::steady_clock::now();
  int reads = 0, slow_reads = 0;
  Status last;
  while (std::chrono::steady_clock::now() - start < window) {
    const auto t0 = std::chrono::steady_clock::now();
    Completion c = tier.Read(kNs, std::span(&r, 1));
    ASSERT_TRUE(c.WaitFor(std::chrono::milliseconds(timeout_ms * 3)).ok() || c.Poll());
    last = c.result(0);
    ASSERT_FALSE(last.ok()) << "a paused server served a read";
    ++reads;
    slow_reads += std::chrono::steady_clock::now() - t0 >= slow ? 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The two connections that were up each hold one read to its timeout.
  EXPECT_LE(slow_reads, 2) << "of " << reads << " reads";
  EXPECT_GE(reads - slow_reads, 20);
  EXPECT_EQ(last.code(), StatusCode::kUnavailable) << last.ToString();
  EXPECT_NE(last.message().find("answered nothing"), std::string::npos) << last.ToString();

  // Answering again, it serves again once a connection is back.
  procs[0]->Resume();
  const auto until = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(5));
  Status st;
  do {
    std::fill(out.begin(), out.end(), std::byte{0});
    st = tier.Read(kNs, std::span(&r, 1)).Wait();
    if (!st.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (!st.ok() && std::chrono::steady_clock::now() < until);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out, data);
  tier.Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
