#include "io/asio_loop.h"

#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>
#include <stdexcept>
#include <thread>

#include "tests/support/returns_within.h"

namespace kvtier::internal {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

int SendBuffer(tcp::socket& s) {
  asio::socket_base::send_buffer_size v;
  s.get_option(v);
  return v.value();
}

int ReceiveBuffer(tcp::socket& s) {
  asio::socket_base::receive_buffer_size v;
  s.get_option(v);
  return v.value();
}

// The bulk buffers are asked for only where the kernel grants them whole;
// elsewhere the socket keeps the kernel's own sizing, never a smaller cap.
TEST(TuneBulkSocket, GrowsBuffersOnlyWhereTheKernelAllowsTheFullSize) {
  asio::io_context io;
  tcp::socket plain(io), tuned(io);
  plain.open(tcp::v4());
  tuned.open(tcp::v4());
  TuneBulkSocket(tuned);
  if (BulkBuffersAllowed(true)) {
    // Asio halves what Linux reports, undoing the kernel's doubling.
    EXPECT_EQ(SendBuffer(tuned), kBulkSocketBufferBytes);
  } else {
    EXPECT_EQ(SendBuffer(tuned), SendBuffer(plain));
  }
  if (BulkBuffersAllowed(false)) {
    EXPECT_EQ(ReceiveBuffer(tuned), kBulkSocketBufferBytes);
  } else {
    EXPECT_EQ(ReceiveBuffer(tuned), ReceiveBuffer(plain));
  }
}

TEST(ParseTcpEndpoint, AcceptsHostPortAndRefusesBadInput) {
  auto ep = ParseTcpEndpoint("127.0.0.1:7401", false);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_EQ(ep->port(), 7401);
  EXPECT_EQ(ep->address().to_string(), "127.0.0.1");
  EXPECT_FALSE(ParseTcpEndpoint("127.0.0.1:0", false).ok());
  EXPECT_TRUE(ParseTcpEndpoint("127.0.0.1:0", true).ok());
  EXPECT_FALSE(ParseTcpEndpoint("127.0.0.1", false).ok());
  EXPECT_FALSE(ParseTcpEndpoint("127.0.0.1:65536", false).ok());
}

// An IPv6 literal in brackets is split at the bracket; the unbracketed
// form still splits at the last colon.
TEST(ParseTcpEndpoint, ReadsBracketedIpv6) {
  auto ep = ParseTcpEndpoint("[::1]:7402", false);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_EQ(ep->address().to_string(), "::1");
  EXPECT_EQ(ep->port(), 7402);
  auto hp = SplitHostPort("[fd00::5]:0", true);
  ASSERT_TRUE(hp.ok()) << hp.status().ToString();
  EXPECT_EQ(hp->host, "fd00::5");
  EXPECT_EQ(hp->port, 0);
  auto bare = SplitHostPort("fd00::5:7400", false);
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->host, "fd00::5");
  auto zoned = SplitHostPort("fe80::1%eth0:7400", false);
  ASSERT_TRUE(zoned.ok()) << zoned.status().ToString();
  EXPECT_EQ(zoned->host, "fe80::1%eth0");
  for (const char* bad : {"[::1]", "[::1]:", "[::1]7400", "[]:7400", "[::1:7400", ":7400", "::1",
                          "[a.b]:7400", "h/x:7400", "h,g:7400"}) {
    EXPECT_EQ(SplitHostPort(bad, true).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// Call answers whoever waits even when the closure throws, and the loop
// keeps serving; after Stop it refuses at once instead of waiting forever.
TEST(AsioLoopCall, AnswersWhenTheClosureThrowsAndAfterStop) {
  AsioLoop loop("test-loop", nullptr);
  std::thread::id ran_on;
  ASSERT_TRUE(loop.Call([&] { ran_on = std::this_thread::get_id(); }).ok());
  EXPECT_NE(ran_on, std::this_thread::get_id());

  Status threw;
  ASSERT_TRUE(
      testing::ReturnsWithin([&] { threw = loop.Call([] { throw std::runtime_error("boom"); }); },
                             std::chrono::seconds(5)));
  EXPECT_EQ(threw.code(), StatusCode::kInternal) << threw.ToString();
  EXPECT_NE(threw.message().find("boom"), std::string::npos) << threw.ToString();

  int after = 0;
  EXPECT_TRUE(loop.Call([&] { after = 1; }).ok());
  EXPECT_EQ(after, 1);

  // A posted handler that throws something not derived from std::exception
  // ends only itself, not the process.
  ASSERT_TRUE(loop.Post([] { throw 42; }));
  EXPECT_TRUE(loop.Call([&] { after = 1; }).ok());

  loop.Stop();
  Status refused;
  ASSERT_TRUE(testing::ReturnsWithin([&] { refused = loop.Call([&] { after = 2; }); },
                                     std::chrono::seconds(5)));
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.ToString();
  EXPECT_EQ(after, 1);
}

}  // namespace
}  // namespace kvtier::internal
