// kvtier-bench redis: its options are checked before any server is started
// or contacted.
#include "tools/bench/redis_bench.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tests/support/child_process.h"

namespace kvtier::bench {
namespace {

TEST(RedisBenchOptions, ServerPortIsPlainDigitsInRange) {
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(SplitRedisServer("127.0.0.1:6380", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 6380);
  ASSERT_TRUE(SplitRedisServer("::1:65535", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);

  for (const char* bad : {"127.0.0.1:abc", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:0",
                          "127.0.0.1:99999999999999999999", "127.0.0.1:12x", "127.0.0.1:-1",
                          "127.0.0.1: 80", "127.0.0.1", ":6379"}) {
    host = "unchanged";
    port = 7;
    Status s = SplitRedisServer(bad, &host, &port);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(std::string("--server '") + bad + "'"), std::string_view::npos)
        << s.message();
    EXPECT_EQ(host, "unchanged");
    EXPECT_EQ(port, 7);
  }
  EXPECT_EQ(SplitRedisServer("127.0.0.1:abc", &host, &port).message(),
            "--server '127.0.0.1:abc': bad port; expected host:port with a port of 1 to 65535");
}

// Validate is what RunRedisBench checks first: a bad --server fails there,
// before a redis-server or redis-benchmark is started.
TEST(RedisBenchOptions, ValidateRejectsABadServer) {
  RedisBenchOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.server = "127.0.0.1:6379";
  EXPECT_TRUE(o.Validate().ok());
  for (const char* bad : {"127.0.0.1:abc", "127.0.0.1:", "127.0.0.1:70000", "localhost"}) {
    o.server = bad;
    EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(RunRedisBench(o).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(RedisBenchOptions, TlsCaFileNeedsTls) {
  RedisBenchOptions o;
  o.tls_ca_file = "/etc/ssl/ca.pem";
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o.tls = true;
  EXPECT_TRUE(o.Validate().ok());
}

// A short run over TLS, with a server and certificate of its own: both sides
// move every byte (the tier checks what it reads back) and the table says TLS.
TEST(RedisBenchTls, ShortRunComparesBothSidesOverTls) {
  for (const char* tool : {"redis-server", "redis-benchmark", "openssl"}) {
    if (!kvtier::testing::OnPath(tool)) GTEST_SKIP() << tool << " is not installed";
  }
  RedisBenchOptions o;
  o.tls = true;
  o.value_sizes = {64 << 10};
  o.pipeline = 4;
  o.clients = 1;
  o.total_bytes = 4 << 20;
  o.rounds = 1;
  auto report = RunRedisBench(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->tls);
  ASSERT_EQ(report->rows.size(), 2u);
  for (const RedisBenchRow& r : report->rows) {
    EXPECT_GT(r.redis_benchmark_mb_s, 0) << r.op;
    EXPECT_GT(r.tier_mb_s, 0) << r.op;
  }
  EXPECT_NE(FormatRedisBench(*report).find("over TLS"), std::string::npos);
}

// A loopback port that refuses connections: bound, never listening.
class RefusingPort {
 public:
  RefusingPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port_ = ntohs(a.sin_port);
    }
  }
  ~RefusingPort() {
    if (fd_ >= 0) close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  int fd_;
  uint16_t port_ = 0;
};

// redis-benchmark runs without a shell, so a quote in the password cannot
// break the command, and a failed run's message never shows the password.
TEST(RedisBenchPeerTest, FailureMessageNeverHoldsThePassword) {
  RefusingPort refusing;
  ASSERT_NE(refusing.port(), 0);
  RedisBenchOptions o;
  o.password = "pa'ss word\"$(x)";
  o.pipeline = 1;
  o.clients = 1;
  Result<RedisBenchmarkRps> r = RunRedisBenchmark("127.0.0.1", refusing.port(), o, 64, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  const std::string text = r.status().ToString();
  EXPECT_EQ(text.find("pa'ss"), std::string::npos) << text;
  EXPECT_EQ(text.find("word"), std::string::npos) << text;
  EXPECT_NE(text.find("redis-benchmark"), std::string::npos) << text;
  EXPECT_NE(text.find("127.0.0.1 port " + std::to_string(refusing.port())), std::string::npos)
      << text;
}

}  // namespace
}  // namespace kvtier::bench
