#include "tools/inspect/admin_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/admin_server.h"

namespace kvtier::inspect {
namespace {

using internal::UniqueFd;
using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

// The largest reply read: /stats and /metrics of a runtime with many tiers
// and namespaces are tens of KiB.
constexpr size_t kMaxReplyBytes = 16u << 20;

Status WaitFor(int fd, short events, Clock::time_point deadline, const std::string& what) {
  // Past the deadline poll(0) still reports queued bytes: a peer that never
  // stops sending would hold the read loop for as long as it sends.
  if (Clock::now() >= deadline) return Status::DeadlineExceeded(what + ": no answer in time");
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, RemainingMs(deadline));
    if (r > 0) return Status::Ok();
    if (r == 0) return Status::DeadlineExceeded(what + ": no answer in time");
    if (errno != EINTR) return FromErrno(errno, what);
  }
}

Result<std::string> ParseReply(const std::string& raw, const std::string& what) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) {
    return Status::IOError(what + ": not an admin endpoint reply");
  }
  const size_t sp = raw.find(' ');
  const int code = std::atoi(raw.c_str() + sp + 1);
  std::string body = raw.substr(head_end + 4);
  if (code == 200) return body;
  while (!body.empty() && body.back() == '\n') body.pop_back();
  if (code == 404) return Status::NotFound(what + ": " + body);
  return Status::InvalidArgument(what + ": HTTP " + std::to_string(code) + ": " + body);
}

}  // namespace

Result<std::string> FetchAdmin(const std::string& socket_path, std::string_view path,
                               std::chrono::milliseconds timeout) {
  const std::string what = "admin socket " + socket_path;
  const auto deadline = Clock::now() + timeout;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument(what + ": path must be 1 to " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  // Non-blocking, so that a runtime whose backlog is full (EAGAIN; a Unix
  // socket's connect cannot be polled) is retried until the deadline
  // instead of holding a blocking connect forever.
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return FromErrno(errno, what);
  while (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      return Status::Unavailable(what + ": cannot connect: " + std::strerror(errno) +
                                 " (is a runtime running with runtime.admin_socket set?)");
    }
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded(what + ": the runtime accepts no connection (backlog full)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string request = "GET " + std::string(path) + " HTTP/1.0\r\nHost: kvtier\r\n\r\n";
  for (size_t sent = 0; sent < request.size();) {
    KVTIER_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, what));
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return Status::Unavailable(what + ": the runtime closed the connection without answering");
    }
    if (n < 0 && errno != EINTR && errno != EAGAIN) return FromErrno(errno, what + ": send");
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[16384];
  for (;;) {
    KVTIER_RETURN_IF_ERROR(WaitFor(fd.get(), POLLIN, deadline, what));
    const ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    // Closed before a byte of the reply: the runtime is going away (a
    // shutdown drops what it has not yet accepted).
    if ((n == 0 || (n < 0 && errno == ECONNRESET)) && raw.empty()) {
      return Status::Unavailable(what + ": the runtime closed the connection without answering");
    }
    if (n < 0) return FromErrno(errno, what + ": read");
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > kMaxReplyBytes) {
      return Status::IOError(what + ": the reply passed " + std::to_string(kMaxReplyBytes >> 20) +
                             " MiB; not an admin endpoint (a /stats reply is a few KiB)");
    }
  }
  return ParseReply(raw, what);
}

}  // namespace kvtier::inspect
