// A stand-in for a Redis server on 127.0.0.1 that answers each command with
// bytes a test scripts: a buggy or hostile server, or the wrong service on the
// port. Every accepted connection gets its own thread, which parses RESP
// commands and sends the script's answer. All waits are bounded and the
// destructor closes every socket, so a test using it cannot hang.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvtier::testing {

class ScriptedRedis {
 public:
  struct Answer {
    std::string bytes;         // sent as is
    uint64_t flood_bytes = 0;  // then this many bytes of 'A'
    // > 0: the flood trickles, one byte at a time this far apart.
    std::chrono::milliseconds flood_gap{0};
    bool close = false;  // then close the connection, as a server that goes away
  };
  // Called on a connection's thread for each command, argv[0] upper-cased.
  using Script = std::function<Answer(const std::vector<std::string>& argv)>;

  // How a flood ended.
  struct Flood {
    bool ended = false;
    uint64_t sent_bytes = 0;
    bool peer_closed = false;  // the client closed or reset the connection
  };

  // Listens on a free loopback port; null when the socket cannot be set up.
  static std::unique_ptr<ScriptedRedis> Start(Script script) {
    std::unique_ptr<ScriptedRedis> s(new ScriptedRedis(std::move(script)));
    s->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (s->listen_fd_ < 0 || bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(s->listen_fd_, 16) != 0 ||
        getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return nullptr;
    }
    s->port_ = ntohs(addr.sin_port);
    s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
    return s;
  }

  ~ScriptedRedis() {
    stop_.store(true, std::memory_order_release);
    if (accept_thread_.joinable()) accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
    std::lock_guard lock(mu_);
    for (int fd : fds_) close(fd);
    if (listen_fd_ >= 0) close(listen_fd_);
  }
  ScriptedRedis(const ScriptedRedis&) = delete;
  ScriptedRedis& operator=(const ScriptedRedis&) = delete;

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(std::memory_order_acquire); }

  // Waits up to `limit` for a flood to end, then reports how.
  Flood WaitFlood(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, limit, [this] { return flood_.ended; });
    return flood_;
  }

  // Answers of a well-behaved server to the commands a tier sends at open:
  // PING, AUTH, SELECT, CONFIG GET, the ACL probes and, for `slot_owner_port` != 0, a
  // CLUSTER SLOTS naming 127.0.0.1:slot_owner_port as the one master. False
  // for any other command.
  static bool Handshake(const std::vector<std::string>& argv, uint16_t slot_owner_port,
                        Answer* answer) {
    const std::string& cmd = argv[0];
    if (cmd == "PING") {
      answer->bytes = "+PONG\r\n";
    } else if (cmd == "AUTH" || cmd == "SELECT") {
      answer->bytes = "+OK\r\n";
    } else if (cmd == "CONFIG") {
      answer->bytes = "*0\r\n";
    } else if ((cmd == "EXISTS" || cmd == "DEL") && argv.size() == 2 &&
               argv[1].ends_with(":access-probe")) {
      answer->bytes = ":0\r\n";  // the open's ACL probes (RedisRouter::CheckKeyAccess)
    } else if (cmd == "CLUSTER" && slot_owner_port != 0) {
      answer->bytes = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" +
                      std::to_string(slot_owner_port) + "\r\n";
    } else {
      return false;
    }
    return true;
  }

 private:
  explicit ScriptedRedis(Script script) : script_(std::move(script)) {}

  void AcceptLoop() {
    while (!stop_.load(std::memory_order_acquire)) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      // Short send waits, so a flood notices a stop within a moment.
      timeval tv{0, 50'000};
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      accepted_.fetch_add(1, std::memory_order_acq_rel);
      std::lock_guard lock(mu_);
      fds_.push_back(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  // Parses one command at the front of `in` into *argv; false if incomplete.
  static bool TakeCommand(std::string& in, std::vector<std::string>* argv) {
    size_t pos = 0;
    auto line = [&](long long* v) {
      const size_t crlf = in.find("\r\n", pos);
      if (crlf == std::string::npos) return false;
      *v = std::stoll(in.substr(pos + 1, crlf - pos - 1));
      pos = crlf + 2;
      return true;
    };
    long long count = 0;
    if (in.empty() || in[0] != '*' || !line(&count) || count < 1) return false;
    argv->clear();
    for (long long i = 0; i < count; ++i) {
      long long len = 0;
      if (!line(&len) || in.size() < pos + len + 2) return false;
      argv->push_back(in.substr(pos, len));
      pos += len + 2;
    }
    for (char& c : (*argv)[0]) c = static_cast<char>(toupper(c));
    in.erase(0, pos);
    return true;
  }

  // Sends `bytes`; false once the peer is gone or the server stops.
  bool SendAll(int fd, const char* data, size_t size, bool* peer_closed) {
    while (size > 0 && !stop_.load(std::memory_order_acquire)) {
      const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
      if (n > 0) {
        data += n;
        size -= static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        continue;
      } else {
        *peer_closed = true;
        return false;
      }
    }
    return size == 0;
  }

  void RunFlood(int fd, uint64_t total, std::chrono::milliseconds gap) {
    const std::string chunk(gap.count() > 0 ? 1 : 64 * 1024, 'A');
    Flood f;
    while (f.sent_bytes < total && !f.peer_closed && !stop_.load(std::memory_order_acquire)) {
      const size_t n = std::min<uint64_t>(chunk.size(), total - f.sent_bytes);
      if (!SendAll(fd, chunk.data(), n, &f.peer_closed)) break;
      f.sent_bytes += n;
      if (gap.count() > 0) std::this_thread::sleep_for(gap);
    }
    f.ended = true;
    std::lock_guard lock(mu_);
    flood_ = f;
    cv_.notify_all();
  }

  void Serve(int fd) {
    std::string in;
    std::vector<std::string> argv;
    char buf[64 * 1024];
    while (!stop_.load(std::memory_order_acquire)) {
      while (TakeCommand(in, &argv)) {
        const Answer a = script_(argv);
        bool closed = false;
        if (!SendAll(fd, a.bytes.data(), a.bytes.size(), &closed)) return;
        if (a.flood_bytes > 0) return RunFlood(fd, a.flood_bytes, a.flood_gap);
        if (a.close) {
          shutdown(fd, SHUT_RDWR);  // the destructor closes the descriptor
          return;
        }
      }
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
    }
  }

  const Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread accept_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> fds_;              // guarded by mu_
  std::vector<std::thread> threads_;  // guarded by mu_
  Flood flood_;                       // guarded by mu_
};

}  // namespace kvtier::testing
