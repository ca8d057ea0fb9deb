// kvtier-memd at its connection limit: sockets that never authenticate give
// way to new connections, and a connection refused is told why.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "tests/remote/memd_guard_fixture.h"
#include "tests/support/recording_log.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::testing {
namespace {

class MemdLimitTest : public MemdGuardTest {};

// Sends HELLO; returns the opcode of the answer (CHALLENGE, or ERROR with
// its text in *error).
memd::Opcode Hello(RawClient& c, std::string* error) {
  memd::Hello hello;
  hello.nonce = memd::RandomNonce();
  c.Send(memd::Frame(memd::Opcode::kHello, 1, memd::EncodeBody(hello)));
  auto f = c.ReadFrame();
  if (!f.has_value()) return memd::Opcode::kHello;  // nothing came back
  if (f->first.opcode == memd::Opcode::kError) {
    auto e = memd::DecodeError(f->second);
    if (e.ok()) *error = e->text;
  }
  return f->first.opcode;
}

// Two sockets that never send a byte hold the whole limit. The tier's
// connection used to be closed unanswered until one of them timed out; now
// the older idle one gives way, and is told why when it speaks.
TEST_F(MemdLimitTest, SocketsStillInTheirHandshakeGiveWayToANewConnection) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) {
    o.max_connections = 2;
    o.handshake_timeout_ms = 30000;  // no timeout frees them during the test
  }));
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 2; ++i) idle.push_back(std::make_unique<RawClient>(server_->port()));
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  ASSERT_NO_FATAL_FAILURE(Put(0));
  ASSERT_NO_FATAL_FAILURE(ExpectStored(0));
  int displaced = 0, served = 0;
  for (auto& c : idle) {
    std::string error;
    const memd::Opcode answer = Hello(*c, &error);
    if (answer == memd::Opcode::kError) {
      ++displaced;
      EXPECT_EQ(error,
                "connection limit of 2 reached before this connection completed its "
                "handshake");
      EXPECT_TRUE(c->SeesEof());
    } else {
      EXPECT_EQ(answer, memd::Opcode::kChallenge);
      ++served;
    }
  }
  EXPECT_EQ(displaced, 1);
  EXPECT_EQ(served, 1);
}

// A displaced socket that never speaks is told the limit, not a timeout,
// when its handshake time runs out.
TEST_F(MemdLimitTest, ADisplacedSilentSocketIsToldTheLimitAtItsTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) {
    o.max_connections = 1;
    o.handshake_timeout_ms = 300;
  }));
  RawClient idle(server_->port());
  RawClient next(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(next, kSecret));
  idle.ExpectError("connection limit of 1 reached before this connection completed its handshake");
}

// With every connection authenticated, a new one is refused, and its
// HELLO is answered with the reason instead of a bare close.
TEST_F(MemdLimitTest, AConnectionOverTheLimitIsToldWhy) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) { o.max_connections = 1; }));
  RawClient authed(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(authed, kSecret));
  RawClient late(server_->port());
  std::string error;
  EXPECT_EQ(Hello(late, &error), memd::Opcode::kError);
  EXPECT_EQ(error, "connection limit of 1 reached; retry later or raise max_connections");
  EXPECT_TRUE(late.SeesEof());
  // The authenticated one is untouched.
  authed.Send(memd::Frame(memd::Opcode::kStats, 3, {}));
  auto r = authed.ReadFrame();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first.opcode, memd::Opcode::kStatsReply);
}

// A remote tier opened against a full server fails with that reason.
TEST_F(MemdLimitTest, ATierRefusedAtTheLimitSaysWhy) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) { o.max_connections = 1; }));
  RawClient authed(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(authed, kSecret));
  const Status opened = TryOpenTier();
  EXPECT_EQ(opened.code(), StatusCode::kUnavailable);
  EXPECT_NE(opened.message().find("connection limit of 1 reached; retry later or raise "
                                  "max_connections"),
            std::string_view::npos)
      << opened.ToString();
}

// Peers can cause the server's warnings at will (a socket over the limit, a
// malformed frame): each kind is logged at most once a second, saying how
// many were held back, so the log cannot be flooded from the network.
TEST_F(MemdLimitTest, WarningsPeersCauseAreLoggedOnceASecond) {
  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "memd: ");
  ASSERT_NO_FATAL_FAILURE(StartServer([&](memd::MemdServerOptions& o) {
    o.max_connections = 1;
    o.log = log;
  }));
  auto authed = std::make_unique<RawClient>(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(*authed, kSecret));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    RawClient late(server_->port());
    std::string error;
    EXPECT_EQ(Hello(late, &error), memd::Opcode::kError);
  }
  authed.reset();
  std::vector<std::byte> frame = memd::Frame(memd::Opcode::kStats, 1, {});
  frame[0] = std::byte{0};  // not the magic
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Eventually([&] { return server_->TEST_Connections() == 0; }));
    RawClient bad(server_->port());
    bad.Send(frame);
    auto reply = bad.ReadFrame();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->first.opcode, memd::Opcode::kError);
  }
  if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(900)) {
    GTEST_SKIP() << "too slow here to fall within one second";
  }
  // One for the connections refused; one for the connections closed (those
  // refused, told so at their HELLO, then those with a bad frame).
  size_t refused = 0, closed = 0;
  std::string all;
  for (const std::string& line : log->lines()) {
    refused += line.find("; refusing a client") != std::string::npos;
    closed += line.find("; closing the connection") != std::string::npos;
    all += line + "\n";
  }
  EXPECT_EQ(refused, 1u) << all;
  EXPECT_EQ(closed, 1u) << all;
  EXPECT_EQ(log->lines().size(), 2u) << all;
}

}  // namespace
}  // namespace kvtier::testing
