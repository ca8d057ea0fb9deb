// The recurring deadline checks of kvtier-memd and of the remote client when
// memory runs out for a while: each tick throws while every allocation
// fails, and must be armed again, so that once memory is back an idle
// connection still meets its handshake deadline (server) and an unanswered
// request still fails at its own (client).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/core/alloc_failure.h"
#include "tests/remote/memd_test_options.h"
#include "tests/remote/raw_memd_client.h"
#include "tests/remote/scripted_memd.h"

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Set-up slower than this leaves too little of the deadline to fail
// allocations across: the test says so and skips (a heavily loaded host).
constexpr auto kMaxSetUp = std::chrono::milliseconds(400);

TEST(MemdServerAllocFailureTest, TicksGoOnAfterTheyThrow) {
  memd::MemdServerOptions o = SmallMemdOptions("alloc-test-secret", "tcp");
  o.handshake_timeout_ms = 1000;  // a deadline tick every 250 ms
  auto started = memd::MemdServer::Start(o);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<memd::MemdServer> server = std::move(started).value();
  // Says HELLO and gets its CHALLENGE (so the server has accepted it), then
  // never answers it.
  const auto start = Clock::now();
  RawClient idle(server->port());
  ASSERT_TRUE(idle.connected());
  memd::Hello hello;
  hello.nonce = memd::RandomNonce();
  idle.Send(memd::Frame(memd::Opcode::kHello, 1, memd::EncodeBody(hello)));
  auto challenge = idle.ReadFrame();
  ASSERT_TRUE(challenge.has_value());
  ASSERT_EQ(challenge->first.opcode, memd::Opcode::kChallenge);
  if (Clock::now() - start > kMaxSetUp) GTEST_SKIP() << "the handshake took too long to test";
  FailEveryAllocation();
  // Nothing here allocates: the ticks that run meanwhile throw, past the
  // handshake deadline.
  std::this_thread::sleep_until(start + std::chrono::milliseconds(1400));
  EXPECT_TRUE(DisarmAllocationFailures());
  idle.ExpectError("handshake not completed within 1000 ms");
  RawClient later(server->port());
  ASSERT_TRUE(later.connected());
  later.ExpectError("handshake not completed within 1000 ms");
  server->Stop();
}

TEST(RemoteClientAllocFailureTest, TheDeadlineTickGoesOnAfterItThrows) {
  constexpr char kSecret[] = "alloc-test-secret";
  std::atomic<bool> asked{false};
  ScriptedMemd server([&](ScriptedConn& c) {
    if (!c.Welcome(kSecret, 4096)) return;
    if (!c.ReadFrame()) return;  // the request, never answered
    asked = true;
    (void)c.ClosedWithin(std::chrono::seconds(10));  // allocates nothing while it waits
  });
  auto client = memd::RemoteClient::Create(ScriptedClientOptions(server, kSecret, 1000),
                                           StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ItemResults unanswered(1);
  const auto start = Clock::now();
  (*client)->Exists(0, NamespaceId{11}, {BlockKey{3, 3}}, unanswered.Done());
  // Armed only once the request is out and the server waits allocating
  // nothing (its thread would end the process on bad_alloc).
  while (!asked && Clock::now() - start < kMaxSetUp) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!asked) GTEST_SKIP() << "the request took too long to reach the server to test";
  FailEveryAllocation();
  // Past the request's 1 s deadline: the ticks that find it late throw.
  std::this_thread::sleep_until(start + std::chrono::milliseconds(1400));
  EXPECT_TRUE(DisarmAllocationFailures());
  ASSERT_TRUE(unanswered.WaitFor(std::chrono::seconds(3))) << "the request never timed out";
  EXPECT_EQ(unanswered.status(0).code(), StatusCode::kDeadlineExceeded)
      << unanswered.status(0).ToString();
  (*client)->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
