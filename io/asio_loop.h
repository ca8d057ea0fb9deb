// AsioLoop: one Boost.Asio io_context and the one thread that runs it, for
// kvtier's networking (the remote tier's connections, the kvtier-memd
// server). Asio headers are heavy: include this header only from the few .cc
// files that do networking, never from a header on a hot include path.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "io/host_port.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// The one conversion of Asio / system errors: connection loss (EOF, reset,
// refused, aborted, broken pipe) is Unavailable, a timeout DeadlineExceeded,
// anything else IOError; the message names `operation` and the cause.
Status FromAsio(const boost::system::error_code& ec, std::string_view operation);

// Looks a host up (system resolver, any family), IPv4 addresses first:
// memd listens on IPv4 unless told an IPv6 address. Unavailable when the
// name has no address.
Result<std::vector<boost::asio::ip::tcp::endpoint>> ResolveHostPort(const HostPort& hp);

// Parses "host:port" (an IP literal, "[IPv6]:port", "localhost" or a name
// the resolver knows, its first address as ResolveHostPort orders them;
// port 0 allowed when `allow_port0`). InvalidArgument naming the entry.
Result<boost::asio::ip::tcp::endpoint> ParseTcpEndpoint(std::string_view text, bool allow_port0);

// A completion condition for asio::async_read / async_write that transfers
// every byte like asio::transfer_all, but without its 64 KiB cap per system
// call: a 1 MiB block then moves in one sendmsg/recvmsg when the socket
// buffers allow, not in sixteen calls with an epoll round trip each.
struct TransferAllBulk {
  size_t operator()(const boost::system::error_code& ec, size_t /*transferred*/) const {
    return ec ? 0 : size_t{1} << 30;
  }
};

// Socket buffers asked for on bulk-data sockets (the kernel doubles what it
// grants).
inline constexpr int kBulkSocketBufferBytes = 4 << 20;

// Whether asking for kBulkSocketBufferBytes helps: only when the kernel lets
// a socket have that much (net.core.wmem_max / rmem_max). Below it the
// request would be cut to the cap and would also switch off the kernel's
// own buffer sizing, which may grow past that cap (net.ipv4.tcp_wmem/rmem).
bool BulkBuffersAllowed(bool send);

// Prepares a socket (or a listener, whose accepted sockets inherit it) for
// bulk transfers of large blocks: big send and receive buffers, so that one
// sendmsg/recvmsg moves megabytes instead of a window's worth and the
// sender sleeps in epoll far less often. Best effort: a refused option only
// costs speed. Must run before connect/listen so that the receive buffer
// takes part in window scaling.
template <typename Socket>
void TuneBulkSocket(Socket& s) {
  boost::system::error_code ignored;
  if (BulkBuffersAllowed(true)) {
    s.set_option(boost::asio::socket_base::send_buffer_size(kBulkSocketBufferBytes), ignored);
  }
  if (BulkBuffersAllowed(false)) {
    s.set_option(boost::asio::socket_base::receive_buffer_size(kBulkSocketBufferBytes), ignored);
  }
}

class AsioLoop {
 public:
  // The thread starts at once and runs until Stop().
  AsioLoop(std::string name, std::shared_ptr<LogSink> log);
  // REQUIRES: Stop() was called, or nothing is pending in the context.
  ~AsioLoop();
  AsioLoop(const AsioLoop&) = delete;
  AsioLoop& operator=(const AsioLoop&) = delete;

  boost::asio::io_context& context() { return io_; }
  // Runs `fn` on the loop thread. False, and `fn` dropped, once Stop() has
  // begun: a closure accepted here runs before the thread ends, so whoever
  // waits on it is answered.
  bool Post(std::function<void()> fn);
  // Runs `fn` on the loop thread and waits until it has run. Unavailable,
  // and `fn` dropped, once Stop() has begun; Internal naming the exception
  // when `fn` threw (the loop goes on serving). Not from the loop thread.
  Status Call(std::function<void()> fn);
  // Lets the thread finish once no handler is pending, and joins it. The
  // owner closes its sockets and timers first (through Post) so the pending
  // handlers end with operation_aborted. Idempotent; not from the loop thread.
  void Stop();
  bool InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Run();
  void LogThrow(const char* what) noexcept;

  const std::string name_;
  std::shared_ptr<LogSink> log_;
  boost::asio::io_context io_{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::mutex post_mu_;  // orders Post against Stop setting stopping_
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvtier::internal
