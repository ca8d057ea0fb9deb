// AdminServer: the runtime's read-only admin endpoint on a Unix socket.
//
// One thread accepts connections and answers them one at a time. A request
// is one line, "GET <path>", answered with the body alone and the connection
// closed; or an HTTP/1.x request line (with headers), answered with an
// HTTP/1.0 response, so that `curl --unix-socket` and the kvtier-inspect
// client both work. The handler runs on the server thread and must not block
// for long; a client that has not sent its request within 250 ms is
// dropped, so nothing it does can hold up the engine. Each such client
// delays those queued behind it by up to 250 ms: kvtier-inspect's default
// 2 s (--timeout-ms) outwaits seven of them. The socket is the owner's only
// (mode 0600). At shutdown the requests already sent (the client at hand and
// those queued) are still answered, within a short grace.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct AdminResponse {
  int http_status = 200;  // 200, 400, 404, 405 or 431
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Move-only owner of a file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

class AdminServer {
 public:
  // Maps a request path ("/stats") to a response. Called on the server thread.
  using Handler = std::function<AdminResponse(std::string_view path)>;

  // Binds `socket_path` (mode 0600) and starts the thread. A stale socket
  // file (nobody listening) is replaced; a live one is Unavailable ("in
  // use"); a path that exists and is not a socket, or is too long for a Unix
  // socket address, is InvalidArgument.
  static Result<std::unique_ptr<AdminServer>> Start(const std::string& socket_path,
                                                    Handler handler, std::shared_ptr<LogSink> log);
  // Stops the thread and removes the socket file.
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  const std::string& path() const { return path_; }

 private:
  friend class AdminServerTestPeer;
  using SteadyTime = std::chrono::steady_clock::time_point;

  AdminServer(std::string path, UniqueFd listener, UniqueFd wake, Handler handler,
              std::shared_ptr<LogSink> log);
  // Wakes the server thread to stop; it answers what is queued, then exits.
  void RequestStop();
  void Loop();
  // Answers the connections queued on the listener; at most the backlog.
  void DrainQueued();
  // Answers one client; never throws: a reply that runs out of memory, or
  // a handler that throws, gets a fixed 500 and the thread serves on.
  void Serve(int fd) noexcept;
  void Answer(int fd);
  // Reads the request head: kGone when the client stalls or closes first,
  // kTooLarge past kMaxRequestBytes.
  enum class ReadResult { kComplete, kTooLarge, kGone };
  ReadResult ReadRequest(int fd, std::string* head);
  // Reads and drops what the client still sends after its response (for a
  // short while), so that closing does not reset the connection under it.
  void Drain(int fd);
  void WriteAll(int fd, std::string_view data);
  // Waits for `events` on client `fd` until `deadline` (once stopping, at
  // most until the stop's grace ends): > 0 ready, 0 timed out, < 0 error.
  int WaitClient(int fd, short events, SteadyTime deadline);
  void EnterStopping();

  const std::string path_;
  const UniqueFd listener_;
  const UniqueFd wake_;  // eventfd: written once to stop the thread
  const Handler handler_;
  const std::shared_ptr<LogSink> log_;
  dev_t dev_ = 0;  // identity of the bound socket file, so that the
  ino_t ino_ = 0;  // destructor never unlinks someone else's
  bool accept_failing_ = false;  // server thread only
  bool stopping_ = false;        // server thread only: the wake descriptor fired
  SteadyTime stop_deadline_{};   // server thread only: when stopping_, the grace's end
  std::thread thread_;
};

// Parses a request head: "GET /path" or "GET /path HTTP/1.1" plus headers.
// Sets *path and *http; false when the first line is not of that form.
bool ParseAdminRequest(std::string_view head, std::string* method, std::string* path, bool* http);

}  // namespace kvtier::internal
