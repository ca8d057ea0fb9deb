#include "io/asio_loop.h"

#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>

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

}  // namespace
}  // namespace kvtier::internal
