// kvtier-memd's recurring work when memory runs out for a while: the
// deadline and lease ticks throw while every allocation fails. Each must be
// armed again, so that once memory is back an idle connection still meets
// its handshake deadline, as does a new one.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/core/alloc_failure.h"
#include "tests/remote/memd_test_options.h"
#include "tests/remote/raw_memd_client.h"

namespace kvtier::testing {
namespace {

TEST(MemdServerAllocFailureTest, TicksGoOnAfterTheyThrow) {
  memd::MemdServerOptions o = SmallMemdOptions("alloc-test-secret", "tcp");
  o.handshake_timeout_ms = 200;  // a deadline tick every 50 ms
  auto started = memd::MemdServer::Start(o);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<memd::MemdServer> server = std::move(started).value();
  // Says HELLO and gets its CHALLENGE (so the server has accepted it), then
  // never answers it.
  RawClient idle(server->port());
  ASSERT_TRUE(idle.connected());
  memd::Hello hello;
  hello.nonce = memd::RandomNonce();
  idle.Send(memd::Frame(memd::Opcode::kHello, 1, memd::EncodeBody(hello)));
  auto challenge = idle.ReadFrame();
  ASSERT_TRUE(challenge.has_value());
  ASSERT_EQ(challenge->first.opcode, memd::Opcode::kChallenge);
  FailEveryAllocation();
  // Nothing here allocates: the ticks that run meanwhile throw.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_TRUE(DisarmAllocationFailures());
  idle.ExpectError("handshake not completed within 200 ms");
  RawClient later(server->port());
  ASSERT_TRUE(later.connected());
  later.ExpectError("handshake not completed within 200 ms");
  server->Stop();
}

}  // namespace
}  // namespace kvtier::testing
