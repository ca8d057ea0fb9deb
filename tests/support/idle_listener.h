// A socket listening on a loopback port the kernel picks that never
// accepts: the kernel completes TCP connects to it, and nothing answers.
// For tests of a port another process holds, and of handshakes and replies
// that never come.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace kvtier::testing {

class IdleListener {
 public:
  IdleListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
        listen(fd_, 16) == 0 && getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~IdleListener() {
    if (fd_ >= 0) close(fd_);
  }
  IdleListener(const IdleListener&) = delete;
  IdleListener& operator=(const IdleListener&) = delete;

  uint16_t port() const { return port_; }  // 0 when the socket could not be set up
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace kvtier::testing
