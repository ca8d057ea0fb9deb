// A test-side kvtier-memd peer that speaks the protocol frame by frame over
// a plain blocking socket, for tests that send what a well-behaved client
// never would.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::testing {

namespace memd = internal::memd;

// A plain blocking socket to 127.0.0.1:port with a 5 s receive timeout.
class RawClient {
 public:
  explicit RawClient(uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawClient() { close(fd_); }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  void Send(std::span<const std::byte> b) { (void)!write(fd_, b.data(), b.size()); }
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }
  // Reads one frame; nullopt on EOF or timeout.
  std::optional<std::pair<memd::FrameHeader, std::vector<std::byte>>> ReadFrame() {
    memd::FrameHeaderBytes h;
    if (!ReadAll(h)) return std::nullopt;
    auto d = memd::DecodeFrameHeader(h, 1 << 30);
    if (!d.ok()) return std::nullopt;
    std::vector<std::byte> body(d->body_bytes);
    if (!ReadAll(body)) return std::nullopt;
    return std::make_pair(*d, body);
  }
  // True when the peer closed (read returns 0) rather than timing out.
  bool SeesEof() {
    std::byte b;
    return read(fd_, &b, 1) == 0;
  }
  // Expects an ERROR frame with `text`, then the connection closed.
  void ExpectError(const std::string& text) {
    auto f = ReadFrame();
    ASSERT_TRUE(f.has_value()) << "no ERROR frame";
    ASSERT_EQ(f->first.opcode, memd::Opcode::kError);
    auto e = memd::DecodeError(f->second);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->text, text);
    EXPECT_TRUE(SeesEof()) << "server kept the connection open";
  }

 private:
  bool ReadAll(std::span<std::byte> out) {
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = read(fd_, out.data() + got, out.size() - got);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }
  int fd_;
  bool connected_ = false;
};

// Completes the handshake with the right secret.
inline void Authenticate(RawClient& c, const std::string& secret) {
  memd::Hello hello;
  hello.nonce = memd::RandomNonce();
  c.Send(memd::Frame(memd::Opcode::kHello, 1, memd::EncodeBody(hello)));
  auto ch = c.ReadFrame();
  ASSERT_TRUE(ch.has_value());
  auto challenge = memd::DecodeChallenge(ch->second);
  ASSERT_TRUE(challenge.ok());
  memd::Auth auth{memd::ClientProof(secret, challenge->nonce, hello.nonce)};
  c.Send(memd::Frame(memd::Opcode::kAuth, 1, memd::EncodeBody(auth)));
  auto w = c.ReadFrame();
  ASSERT_TRUE(w.has_value());
  ASSERT_EQ(w->first.opcode, memd::Opcode::kWelcome);
}

}  // namespace kvtier::testing
