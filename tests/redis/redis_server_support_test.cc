// The redis-server launcher the Redis tests stand on
// (tests/support/redis_server.h): ports clear of the kernel's ephemeral
// range, a launch that loses its port to another process moving to another
// port, never handing back a server that is not its own, and setup commands
// that cannot hang a test.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "tests/support/idle_listener.h"
#include "tests/support/redis_server.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The reply to `argv`, or the error's text.
std::string Reply(const RedisServer& server, const std::vector<std::string>& argv) {
  auto r = server.Command(argv);
  return r.ok() ? *r : r.status().ToString();
}

class RedisServerSupportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(RedisServerSupportTest, PortsAvoidTheEphemeralRange) {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0, hi = 0;
  if (!(in >> lo >> hi)) GTEST_SKIP() << "no /proc/sys/net/ipv4/ip_local_port_range";
  auto outside = [lo, hi](int p) { return p < lo || p > hi; };
  bool any = false;
  for (int p = 10000; p + 10000 <= 65535; ++p) any |= outside(p) && outside(p + 10000);
  if (!any) GTEST_SKIP() << "the ephemeral range " << lo << "-" << hi << " leaves no port";
  std::vector<std::unique_ptr<RedisServer>> servers;
  for (int i = 0; i < 6; ++i) {
    auto s = RedisServer::Start();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const int port = (*s)->port();
    // The port, and the cluster bus port (+10000) a cluster node would use.
    EXPECT_TRUE(outside(port)) << port << " is in " << lo << "-" << hi;
    EXPECT_TRUE(outside(port + 10000)) << port << " + 10000 is in " << lo << "-" << hi;
    servers.push_back(std::move(s).value());
  }
}

// A port taken after the check (here: before the launch, by a socket that
// listens but never answers) makes the server exit at start; Start moves on
// and returns a server on another port, which is the one it controls.
TEST_F(RedisServerSupportTest, PortTakenByAListenerIsPassedOver) {
  IdleListener taken;
  ASSERT_NE(taken.port(), 0);
  const auto start = Clock::now();
  auto s = RedisServer::Start(RedisServerOptions{.first_port = taken.port()});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_LT(Clock::now() - start, Scaled(milliseconds(3000)));
  RedisServer& server = **s;
  EXPECT_NE(server.port(), taken.port());
  EXPECT_EQ(Reply(server, {"PING"}), "PONG");
  server.Kill();
  EXPECT_FALSE(server.Command({"PING"}).ok()) << "a server Start did not launch answered";
}

// Another redis holding the port answers PING while the launched one is
// still starting (and about to fail its bind): that must not pass for ours.
TEST_F(RedisServerSupportTest, PortHeldByAnotherRedisIsNotMistakenForOurs) {
  auto other = RedisServer::Start();
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto s = RedisServer::Start(RedisServerOptions{.first_port = (*other)->port()});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RedisServer& ours = **s;
  ASSERT_NE(ours.port(), (*other)->port());
  ASSERT_TRUE(ours.Command({"SET", "whose", "ours"}).ok());
  EXPECT_EQ(Reply(**other, {"GET", "whose"}), "(nil)");
  (*other)->Kill();
  EXPECT_EQ(Reply(ours, {"GET", "whose"}), "ours");
  // Io() reads the launched process: it has served the commands above.
  EXPECT_GT(ours.Io().read, 0u);
  EXPECT_EQ((*other)->Io().read, 0u) << "a killed server reports no I/O";
}

// A server that cannot start at all (here: an unknown option) is not
// launched again and again: Start gives up after a few ports and says why.
TEST_F(RedisServerSupportTest, ServerThatAlwaysExitsFailsStartQuickly) {
  const auto start = Clock::now();
  auto s = RedisServer::Start(RedisServerOptions{.extra_args = {"--no-such-option", "1"}});
  ASSERT_FALSE(s.ok());
  EXPECT_LT(Clock::now() - start, Scaled(milliseconds(5000)));
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("exited at start"), std::string_view::npos)
      << s.status().ToString();
}

TEST_F(RedisServerSupportTest, RunWithDeadlineReportsTheExit) {
  EXPECT_TRUE(RunWithDeadline({"true"}, milliseconds(5000)).ok());
  Status failed = RunWithDeadline({"false"}, milliseconds(5000));
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable) << failed.ToString();
}

// redis-cli against a frozen server waits for its reply without a bound,
// as `redis-cli --cluster create` does on a stuck node: it is killed.
TEST_F(RedisServerSupportTest, StuckRedisCliIsKilledAtTheDeadline) {
  auto s = RedisServer::Start();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  (*s)->Pause();
  const auto start = Clock::now();
  Status st =
      RunWithDeadline({"redis-cli", "-p", std::to_string((*s)->port()), "PING"}, milliseconds(300));
  const auto elapsed = Clock::now() - start;
  (*s)->Resume();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("redis-cli did not finish within 300 ms"), std::string_view::npos)
      << st.ToString();
  EXPECT_GE(elapsed, milliseconds(300));
  EXPECT_LT(elapsed, Scaled(milliseconds(2000)));
}

}  // namespace
}  // namespace kvtier::testing
