// kvtier-memd against a client that sends GETs and never reads the replies:
// the server stops reading that connection while its replies are backlogged,
// so what it queues (and the slots it pins for them) stays bounded, and
// every other connection keeps being served.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "tests/remote/memd_guard_fixture.h"
#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::testing {
namespace {

// A loopback socket that completes the handshake blocking (5 s receive
// timeout), then sends without blocking and never reads.
class FloodClient {
 public:
  explicit FloodClient(uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~FloodClient() { close(fd_); }

  bool Authenticate(const std::string& secret) {
    memd::Hello hello;
    hello.nonce = memd::RandomNonce();
    if (!connected_ || !SendAll(memd::Frame(memd::Opcode::kHello, 1, memd::EncodeBody(hello)))) {
      return false;
    }
    std::vector<std::byte> body;
    if (ReadFrame(&body) != memd::Opcode::kChallenge) return false;
    auto challenge = memd::DecodeChallenge(body);
    if (!challenge.ok()) return false;
    memd::Auth auth{memd::ClientProof(secret, challenge->nonce, hello.nonce)};
    if (!SendAll(memd::Frame(memd::Opcode::kAuth, 1, memd::EncodeBody(auth)))) return false;
    return ReadFrame(&body) == memd::Opcode::kWelcome;
  }

  // Sends GETs of `keys` until the socket takes no more for a while, at most
  // `max_frames`; returns how many went out whole.
  size_t FloodWithGets(const std::vector<BlockKey>& keys, size_t max_frames) {
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    const auto frame =
        memd::Frame(memd::Opcode::kGet, 9, memd::EncodeBody(memd::KeyBatch{NamespaceId{11}, keys}));
    size_t sent = 0, partial = 0;
    int refusals = 0;
    while (sent < max_frames && refusals < 10) {
      ssize_t n = send(fd_, frame.data() + partial, frame.size() - partial, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) break;
        ++refusals;  // full; the server may still be reading
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      refusals = 0;
      partial += static_cast<size_t>(n);
      if (partial == frame.size()) {
        partial = 0;
        ++sent;
      }
    }
    return sent;
  }

 private:
  bool SendAll(std::span<const std::byte> b) {
    return send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  }
  bool ReadAll(std::span<std::byte> out) {
    for (size_t got = 0; got < out.size();) {
      ssize_t n = read(fd_, out.data() + got, out.size() - got);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }
  memd::Opcode ReadFrame(std::vector<std::byte>* body) {
    memd::FrameHeaderBytes h;
    if (!ReadAll(h)) return memd::Opcode::kError;
    auto d = memd::DecodeFrameHeader(h, 1 << 20);
    if (!d.ok()) return memd::Opcode::kError;
    body->resize(d->body_bytes);
    return ReadAll(*body) ? d->opcode : memd::Opcode::kError;
  }

  int fd_;
  bool connected_ = false;
};

TEST_F(MemdGuardTest, UnreadRepliesStopTheServerReadingThatConnection) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(i));
    keys.push_back(TestKey(i));
  }
  auto flood = std::make_unique<FloodClient>(server_->port());
  ASSERT_TRUE(flood->Authenticate(kSecret));
  // Up to 20,000 GETs of 8 hits each: 160,000 blocks of replies if all were
  // read. The server takes requests until about 64 MiB (2,048 blocks) wait.
  EXPECT_GT(flood->FloodWithGets(keys, 20000), 0u);
  // One request past the bound may be queued, never more.
  const size_t bound = 2 * memd::kMaxBatchItems;
  size_t most = 0;
  for (int i = 0; i < 10; ++i) {
    most = std::max(most, server_->TEST_QueuedReplies());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(most, 0u);
  EXPECT_LE(most, bound);
  // Another connection is served meanwhile, blocks intact.
  ASSERT_NO_FATAL_FAILURE(Put(8));
  ASSERT_NO_FATAL_FAILURE(ExpectStored(8));
  ASSERT_NO_FATAL_FAILURE(ExpectStored(0));
  // Hanging up drops the backlog and its pins.
  flood.reset();
  EXPECT_TRUE(Eventually([&] { return server_->TEST_QueuedReplies() == 0; }))
      << server_->TEST_QueuedReplies();
}

}  // namespace
}  // namespace kvtier::testing
