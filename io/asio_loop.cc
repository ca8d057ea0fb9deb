#include "io/asio_loop.h"

#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <exception>
#include <fstream>
#include <future>

namespace kvtier::internal {

Status FromAsio(const boost::system::error_code& ec, std::string_view operation) {
  if (!ec) return Status::Ok();
  namespace e = boost::asio::error;
  const std::string msg = std::string(operation) + ": " + ec.message();
  if (ec == e::eof || ec == e::connection_reset || ec == e::connection_refused ||
      ec == e::connection_aborted || ec == e::broken_pipe || ec == e::operation_aborted ||
      ec == e::not_connected || ec == e::host_unreachable || ec == e::network_unreachable ||
      ec == e::bad_descriptor) {
    return Status::Unavailable(msg);
  }
  if (ec == e::timed_out) return Status::DeadlineExceeded(msg);
  return Status::IOError(msg);
}

Result<std::vector<boost::asio::ip::tcp::endpoint>> ResolveHostPort(const HostPort& hp) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(hp.host, std::to_string(hp.port),
                                  boost::asio::ip::tcp::resolver::numeric_service, ec);
  if (ec) return Status::Unavailable(ec.message());
  std::vector<boost::asio::ip::tcp::endpoint> found;
  for (const auto& r : results) found.push_back(r.endpoint());
  if (found.empty()) return Status::Unavailable("no address");
  std::stable_partition(found.begin(), found.end(),
                        [](const auto& ep) { return ep.address().is_v4(); });
  return found;
}

Result<boost::asio::ip::tcp::endpoint> ParseTcpEndpoint(std::string_view text, bool allow_port0) {
  KVTIER_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(text, allow_port0));
  const std::string& host = hp.host;
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (!ec) return boost::asio::ip::tcp::endpoint(addr, hp.port);
  auto found = ResolveHostPort(hp);
  if (!found.ok()) {
    return Status::InvalidArgument("endpoint '" + std::string(text) + "': cannot resolve '" + host +
                                   "'");
  }
  return found->front();
}

AsioLoop::AsioLoop(std::string name, std::shared_ptr<LogSink> log)
    : name_(std::move(name)), log_(std::move(log)) {
  work_.emplace(io_.get_executor());
  thread_ = std::thread([this] { Run(); });
}

AsioLoop::~AsioLoop() { Stop(); }

bool AsioLoop::Post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(post_mu_);
  if (stopping_) return false;
  boost::asio::post(io_, std::move(fn));
  return true;
}

Status AsioLoop::Call(std::function<void()> fn) {
  std::promise<Status> ran;
  const bool posted = Post([&fn, &ran] {
    try {
      fn();
      ran.set_value(Status::Ok());
    } catch (const std::exception& e) {
      // Built without letting a second throw escape: the caller waits for
      // this value.
      ran.set_value(DescribedStatus(StatusCode::kInternal, "loop call threw", [&] {
        return Status::Internal(std::string("loop call threw: ") + e.what());
      }));
    } catch (...) {
      ran.set_value(Status::Internal("loop call threw a non-standard exception"));
    }
  });
  if (!posted) return Status::Unavailable(name_ + " is stopping");
  return ran.get_future().get();
}

void AsioLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    stopping_ = true;
  }
  if (!thread_.joinable()) return;
  work_.reset();
  thread_.join();
}

void AsioLoop::Run() {
  // A handler that throws (allocation failure, or anything else) must not
  // take the process down through std::terminate: log it and keep serving.
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      LogThrow(e.what());
    } catch (...) {
      LogThrow("a non-standard exception");
    }
  }
}

void AsioLoop::LogThrow(const char* what) noexcept {
  try {
    if (log_) log_->Log(LogLevel::kError, name_ + ": handler threw: " + what);
  } catch (...) {  // out of memory for the message: the loop goes on without it
  }
}

namespace {
int64_t ReadSysctl(const char* path) {
  std::ifstream in(path);
  int64_t v = -1;
  if (!(in >> v)) return -1;
  return v;
}
}  // namespace

bool BulkBuffersAllowed(bool send) {
  static const bool send_ok = ReadSysctl("/proc/sys/net/core/wmem_max") >= kBulkSocketBufferBytes;
  static const bool recv_ok = ReadSysctl("/proc/sys/net/core/rmem_max") >= kBulkSocketBufferBytes;
  return send ? send_ok : recv_ok;
}

}  // namespace kvtier::internal
