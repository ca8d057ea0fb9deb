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
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// The one conversion of Asio / system errors: connection loss (EOF, reset,
// refused, aborted, broken pipe) is Unavailable, a timeout DeadlineExceeded,
// anything else IOError; the message names `operation` and the cause.
Status FromAsio(const boost::system::error_code& ec, std::string_view operation);

// Parses "host:port" (IPv4 literal, "localhost" or a name the resolver knows;
// port 0 allowed when `allow_port0`). InvalidArgument naming the entry.
Result<boost::asio::ip::tcp::endpoint> ParseTcpEndpoint(std::string_view text, bool allow_port0);

class AsioLoop {
 public:
  // The thread starts at once and runs until Stop().
  AsioLoop(std::string name, std::shared_ptr<LogSink> log);
  // REQUIRES: Stop() was called, or nothing is pending in the context.
  ~AsioLoop();
  AsioLoop(const AsioLoop&) = delete;
  AsioLoop& operator=(const AsioLoop&) = delete;

  boost::asio::io_context& context() { return io_; }
  // Runs `fn` on the loop thread.
  void Post(std::function<void()> fn);
  // Lets the thread finish once no handler is pending, and joins it. The
  // owner closes its sockets and timers first (through Post) so the pending
  // handlers end with operation_aborted. Idempotent; not from the loop thread.
  void Stop();
  bool InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Run();

  const std::string name_;
  std::shared_ptr<LogSink> log_;
  boost::asio::io_context io_{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
};

}  // namespace kvtier::internal
