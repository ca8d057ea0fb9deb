#include "core/admin_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

namespace kvtier::internal {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
// A client gets this long to send its request. Clients are answered one at
// a time, and kvtier-inspect waits 2 s for its answer: a few connections
// that never send must not use that up.
constexpr auto kClientTimeout = std::chrono::milliseconds(250);
// Past a response to a request that was not read whole, what the client
// still sends is read and dropped, for at most this long and this much:
// closing with bytes unread would reset the connection under the response.
constexpr auto kDrainTimeout = std::chrono::milliseconds(200);
constexpr size_t kMaxDrainBytes = 1 << 20;
constexpr auto kWriteTimeout = std::chrono::milliseconds(2000);
// After accept fails for want of a descriptor or memory: the client stays
// queued and the listener readable, so the loop waits this long (for the
// wake descriptor only) before trying again instead of spinning.
constexpr int kAcceptBackoffMs = 100;
// At shutdown the requests already sent are still answered; clients get this
// long in all to be read and written, so a stalled one cannot hold up the stop.
constexpr auto kStopGrace = std::chrono::milliseconds(200);
// How long a start waits for its turn in the socket's directory (Start).
constexpr auto kTurnWait = std::chrono::milliseconds(1000);

using SteadyTime = std::chrono::steady_clock::time_point;

int RemainingMs(SteadyTime deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

// Logs the line `line()` builds; memory running out for it loses the line,
// never the server thread.
template <typename Line>
void LogQuietly(const std::shared_ptr<LogSink>& log, LogLevel level, const Line& line) noexcept {
  if (!log) return;
  try {
    log->Log(level, line());
  } catch (...) {
  }
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Internal Server Error";
  }
}

// True when `head` holds a whole request: one line for the plain protocol, a
// line plus headers ending in an empty line for HTTP.
bool HeadComplete(std::string_view head) {
  const size_t eol = head.find('\n');
  if (eol == std::string_view::npos) return false;
  if (head.substr(0, eol).find(" HTTP/") == std::string_view::npos) return true;
  return head.find("\r\n\r\n") != std::string_view::npos ||
         head.find("\n\n") != std::string_view::npos;
}

// Replaces a socket file nobody listens on; refuses a live one or a file of
// another kind.
Status ClearStaleSocket(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? Status::Ok() : FromErrno(errno, "admin socket stat " + path);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Status::InvalidArgument("admin socket " + path + " exists and is not a socket");
  }
  // Non-blocking: a listener whose backlog is full (a stuck process) would
  // hold a blocking connect forever; EAGAIN means someone listens.
  UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe.valid()) return FromErrno(errno, "admin socket");
  if (connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 ||
      errno == EAGAIN) {
    return Status::Unavailable("admin socket " + path +
                               " is in use (another runtime, in this process or another, "
                               "listens there)");
  }
  if (errno != ECONNREFUSED) return FromErrno(errno, "admin socket probe " + path);
  if (unlink(path.c_str()) != 0) return FromErrno(errno, "admin socket unlink " + path);
  return Status::Ok();
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

bool ParseAdminRequest(std::string_view head, std::string* method, std::string* path, bool* http) {
  std::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp = line.find(' ');
  if (sp == 0 || sp == std::string_view::npos) return false;
  *method = std::string(line.substr(0, sp));
  std::string_view rest = line.substr(sp + 1);
  const size_t sp2 = rest.find(' ');
  *http = sp2 != std::string_view::npos;
  if (*http && rest.substr(sp2 + 1).substr(0, 5) != "HTTP/") return false;
  *path = std::string(rest.substr(0, sp2));
  return !path->empty() && (*path)[0] == '/';
}

Result<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& socket_path,
                                                        Handler handler,
                                                        std::shared_ptr<LogSink> log) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("admin socket path '" + socket_path + "' must be 1 to " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  // The probe, the unlink of a stale file and the bind are three steps: two
  // runtimes starting on one path at once could each find it stale, and the
  // second's unlink would take the first's new socket from it. Runtimes
  // starting in the socket's directory take their turns; one that finds the
  // path live after its turn comes is refused. The turn is waited for a
  // while only: something else may hold the directory's lock for as long
  // as it runs (`flock DIR command`), and the race it guards against is
  // rare.
  const std::string dir = std::filesystem::path(socket_path).parent_path().string();
  UniqueFd turn(open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (turn.valid()) {
    const auto give_up = std::chrono::steady_clock::now() + kTurnWait;
    while (flock(turn.get(), LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err != EWOULDBLOCK || std::chrono::steady_clock::now() >= give_up) {
        if (log != nullptr) {
          const std::string why =
              err == EWOULDBLOCK ? "stayed locked by another process"
                                 : "could not be locked: " + FromErrno(err, "flock").ToString();
          log->Log(LogLevel::kWarning, "admin socket: the directory of " + socket_path + " " + why +
                                           "; starting without waiting for it");
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  KVTIER_RETURN_IF_ERROR(ClearStaleSocket(socket_path, addr));

  UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return FromErrno(errno, "admin socket");
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return FromErrno(errno, "admin socket bind " + socket_path);
  }
  // Stats are the owner's business; the window before chmod only ever has
  // the umask's mode, which a caller controls.
  struct stat st {};
  if (chmod(socket_path.c_str(), 0600) != 0 || stat(socket_path.c_str(), &st) != 0 ||
      listen(listener.get(), 16) != 0) {
    Status s = FromErrno(errno, "admin socket setup " + socket_path);
    unlink(socket_path.c_str());
    return s;
  }
  UniqueFd wake(eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) {
    unlink(socket_path.c_str());
    return FromErrno(errno, "admin socket eventfd");
  }
  std::unique_ptr<AdminServer> server(new AdminServer(
      socket_path, std::move(listener), std::move(wake), std::move(handler), std::move(log)));
  server->dev_ = st.st_dev;
  server->ino_ = st.st_ino;
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

AdminServer::AdminServer(std::string path, UniqueFd listener, UniqueFd wake, Handler handler,
                         std::shared_ptr<LogSink> log)
    : path_(std::move(path)),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      handler_(std::move(handler)),
      log_(std::move(log)) {}

void AdminServer::RequestStop() {
  const uint64_t one = 1;
  if (write(wake_.get(), &one, sizeof(one)) != sizeof(one)) {
    LogQuietly(log_, LogLevel::kError,
               [] { return "admin socket: cannot wake the server thread"; });
  }
}

AdminServer::~AdminServer() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    unlink(path_.c_str());
  }
}

void AdminServer::Loop() {
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      LogQuietly(log_, LogLevel::kError,
                 [err] { return FromErrno(err, "admin socket poll").ToString(); });
      return;
    }
    if (fds[1].revents != 0) {
      EnterStopping();
      DrainQueued();
      return;
    }
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd conn(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (conn.valid()) {
      accept_failing_ = false;
      Serve(conn.get());
      continue;
    }
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED) continue;
    if (!accept_failing_) {
      LogQuietly(log_, LogLevel::kWarning, [err] {
        return FromErrno(err, "admin socket accept").ToString() + "; retrying every " +
               std::to_string(kAcceptBackoffMs) + " ms";
      });
    }
    accept_failing_ = true;  // logged once per run of failures
    pollfd wake = {wake_.get(), POLLIN, 0};
    if (poll(&wake, 1, kAcceptBackoffMs) > 0) return;
  }
}

void AdminServer::EnterStopping() {
  if (stopping_) return;
  stopping_ = true;
  stop_deadline_ = std::chrono::steady_clock::now() + kStopGrace;
}

void AdminServer::DrainQueued() {
  // Non-blocking accepts, within the stop's grace: the listener stays open
  // until the thread ends, so a client that kept connecting would otherwise
  // hold the stop (and Runtime::Shutdown, which waits for it) for as long as
  // it liked. Clients still queued at the end are closed with the listener.
  while (std::chrono::steady_clock::now() < stop_deadline_) {
    UniqueFd conn(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    Serve(conn.get());
  }
}

int AdminServer::WaitClient(int fd, short events, SteadyTime deadline) {
  for (;;) {
    // The wake descriptor stays readable once written: after it fired only
    // the client is watched, until the grace ends.
    if (stopping_) deadline = std::min(deadline, stop_deadline_);
    pollfd fds[2] = {{fd, events, 0}, {wake_.get(), POLLIN, 0}};
    const int r = poll(fds, stopping_ ? 1 : 2, RemainingMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || fds[0].revents != 0) return r;
    EnterStopping();
  }
}

AdminServer::ReadResult AdminServer::ReadRequest(int fd, std::string* head) {
  const SteadyTime deadline = std::chrono::steady_clock::now() + kClientTimeout;
  char buf[1024];
  while (!HeadComplete(*head)) {
    if (head->size() >= kMaxRequestBytes) return ReadResult::kTooLarge;
    if (WaitClient(fd, POLLIN, deadline) <= 0) return ReadResult::kGone;  // error or stalled
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return ReadResult::kGone;
    if (n == 0) {  // the client closed its side: "GET /x" without a newline still counts
      if (head->empty()) return ReadResult::kGone;
      head->push_back('\n');
      return ReadResult::kComplete;
    }
    head->append(buf, static_cast<size_t>(n));
  }
  return ReadResult::kComplete;
}

void AdminServer::Drain(int fd) {
  (void)shutdown(fd, SHUT_WR);  // the response is whole: the client sees its end
  const SteadyTime deadline = std::chrono::steady_clock::now() + kDrainTimeout;
  char buf[4096];
  for (size_t dropped = 0; dropped < kMaxDrainBytes;) {
    if (WaitClient(fd, POLLIN, deadline) <= 0) return;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return;  // the client closed too, or went away
    dropped += static_cast<size_t>(n);
  }
}

void AdminServer::WriteAll(int fd, std::string_view data) {
  const SteadyTime deadline = std::chrono::steady_clock::now() + kWriteTimeout;
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return;  // the client went away
    if (WaitClient(fd, POLLOUT, deadline) <= 0) return;
  }
}

void AdminServer::Serve(int fd) noexcept {
  try {
    Answer(fd);
  } catch (...) {
    // Built without allocating: memory is what most likely ran out.
    static constexpr char kBody[] = "admin endpoint: out of memory, or its handler threw; retry\n";
    char reply[256];
    const int n =
        std::snprintf(reply, sizeof(reply),
                      "HTTP/1.0 500 Internal Server Error\r\nContent-Type: text/plain; "
                      "charset=utf-8\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                      sizeof(kBody) - 1, kBody);
    if (n > 0) (void)send(fd, reply, std::min<size_t>(size_t(n), sizeof(reply) - 1), MSG_NOSIGNAL);
  }
}

void AdminServer::Answer(int fd) {
  std::string head;
  const ReadResult read = ReadRequest(fd, &head);
  if (read == ReadResult::kGone) return;
  std::string method, path;
  bool http = false;
  AdminResponse resp;
  if (read == ReadResult::kTooLarge) {
    // Answered in HTTP: a plain-line request ("GET /path\n") is complete
    // long before 8 KiB, so what overflows is an HTTP head (long headers, or
    // a long request line whose " HTTP/1.x" has not arrived).
    http = true;
    resp = {431, "text/plain; charset=utf-8",
            "request head over " + std::to_string(kMaxRequestBytes) +
                " bytes; expected 'GET /path' and a few headers\n"};
  } else if (!ParseAdminRequest(head, &method, &path, &http)) {
    resp = {400, "text/plain; charset=utf-8", "bad request: expected 'GET /path'\n"};
  } else if (method != "GET") {
    resp = {405, "text/plain; charset=utf-8", "method " + method + " not allowed; use GET\n"};
  } else {
    resp = handler_(path);
  }
  if (!http) {
    WriteAll(fd, resp.body);
    return;
  }
  std::string out =
      "HTTP/1.0 " + std::to_string(resp.http_status) + " " +
      std::string(ReasonPhrase(resp.http_status)) + "\r\nContent-Type: " + resp.content_type +
      "\r\nContent-Length: " + std::to_string(resp.body.size()) + "\r\nConnection: close\r\n\r\n";
  WriteAll(fd, out + resp.body);
  if (read == ReadResult::kTooLarge) Drain(fd);
}

}  // namespace kvtier::internal
