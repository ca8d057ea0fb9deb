// kvtier-bench redis: its options are checked before any server is started
// or contacted.
#include "tools/bench/redis_bench.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvtier::bench
