// A scripted kvtier-memd for remote-client tests: it listens on 127.0.0.1
// and runs a test's script against the first connection, on its own thread,
// so a test can answer a real RemoteClient with what a buggy or hostile
// server would send. Every blocking call is bounded (accept waits 5 s, reads
// time out after 3 s), and the destructor shuts the sockets down before it
// joins, so a script never outlives its test. Also: ItemResults, which
// collects a client call's per-item results with a bounded wait.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvtier/block_header.h"
#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_client.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::testing {

namespace memd = ::kvtier::internal::memd;

// BlockHeader + payload, as a server stores and sends it, under `ns`/`key`.
inline std::vector<std::byte> EncodeStoredBlock(NamespaceId ns, const BlockKey& key,
                                                std::span<const std::byte> payload) {
  std::vector<std::byte> b(kBlockHeaderBytes + payload.size());
  EncodeBlockHeader(MakeBlockHeader(ns, key, payload), std::span(b).first(kBlockHeaderBytes));
  std::copy(payload.begin(), payload.end(), b.begin() + kBlockHeaderBytes);
  return b;
}
using ClientFrame = std::pair<memd::FrameHeader, std::vector<std::byte>>;

// The server's end of one accepted connection.
class ScriptedConn {
 public:
  explicit ScriptedConn(int fd) : fd_(fd) {
    timeval tv{3, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  void Send(std::span<const std::byte> b) { (void)!send(fd_, b.data(), b.size(), MSG_NOSIGNAL); }
  // One client frame; nullopt on EOF, timeout or a malformed header.
  std::optional<ClientFrame> ReadFrame() {
    memd::FrameHeaderBytes h;
    if (!ReadAll(h)) return std::nullopt;
    auto d = memd::DecodeFrameHeader(h, 1u << 30);
    if (!d.ok()) return std::nullopt;
    std::vector<std::byte> body(d->body_bytes);
    if (!ReadAll(body)) return std::nullopt;
    return ClientFrame{*d, std::move(body)};
  }
  // Reads and drops bytes until EOF, an error, a timeout or `limit` bytes;
  // returns how many it read.
  uint64_t Drain(uint64_t limit) {
    std::vector<std::byte> buf(1 << 20);
    uint64_t got = 0;
    while (got < limit) {
      ssize_t n = recv(fd_, buf.data(), std::min<uint64_t>(buf.size(), limit - got), 0);
      if (n <= 0) break;
      got += static_cast<uint64_t>(n);
    }
    return got;
  }
  // True when the client has closed the connection (EOF or reset) within
  // `wait`; bytes it sent are left unread.
  bool ClosedWithin(std::chrono::milliseconds wait) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
    std::byte b;
    return recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
  }
  // The server's side of the handshake with `secret`: CHALLENGE, the
  // client's proof checked, WELCOME. False (with a test failure) when the
  // client strays from it.
  bool Welcome(const std::string& secret, uint64_t slot_bytes) {
    auto hello = ReadFrame();
    if (!hello || hello->first.opcode != memd::Opcode::kHello) return Fail("no HELLO");
    auto h = memd::DecodeHello(hello->second);
    if (!h.ok()) return Fail(h.status().ToString());
    const memd::Challenge challenge{memd::RandomNonce(), 42};
    Send(memd::Frame(memd::Opcode::kChallenge, 0, memd::EncodeBody(challenge)));
    auto auth = ReadFrame();
    if (!auth || auth->first.opcode != memd::Opcode::kAuth) return Fail("no AUTH");
    auto a = memd::DecodeAuth(auth->second);
    if (!a.ok()) return Fail(a.status().ToString());
    if (!memd::SameMac(a->mac, memd::ClientProof(secret, challenge.nonce, h->nonce))) {
      return Fail("the client's proof is wrong");
    }
    const memd::Welcome w{memd::ServerProof(secret, challenge.nonce, h->nonce), slot_bytes, 64};
    Send(memd::Frame(memd::Opcode::kWelcome, 0, memd::EncodeBody(w)));
    return true;
  }

 private:
  static bool Fail(const std::string& why) {
    ADD_FAILURE() << "scripted memd: " << why;
    return false;
  }
  bool ReadAll(std::span<std::byte> out) {
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = recv(fd_, out.data() + got, out.size() - got, 0);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }
  int fd_;
};

class ScriptedMemd {
 public:
  using Script = std::function<void(ScriptedConn&)>;
  // `receive_buffer_bytes` > 0 shrinks the accepted socket's receive
  // buffer (SO_RCVBUF, set on the listener so the connection inherits it).
  explicit ScriptedMemd(Script script, int receive_buffer_bytes = 0)
      : listen_fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    if (receive_buffer_bytes > 0) {
      setsockopt(listen_fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes,
                 sizeof receive_buffer_bytes);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listen_fd_, 1) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "scripted memd: no listening socket";
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, script = std::move(script)] { Serve(script); });
  }
  ~ScriptedMemd() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      shutdown(listen_fd_, SHUT_RDWR);
      if (conn_fd_ >= 0) shutdown(conn_fd_, SHUT_RDWR);
    }
    Join();
    if (conn_fd_ >= 0) close(conn_fd_);
    close(listen_fd_);
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  // Waits for the script to return (its reads are bounded).
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Serve(const Script& script) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) return;
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      conn_fd_ = fd;
      if (stopping_) return;
    }
    ScriptedConn conn(fd);
    script(conn);
  }

  int listen_fd_;
  uint16_t port_ = 0;
  std::mutex mu_;
  int conn_fd_ = -1;  // guarded by mu_ until the thread is joined
  bool stopping_ = false;
  std::thread thread_;
};

// Client options for one connection to a scripted server.
inline memd::RemoteClientOptions ScriptedClientOptions(const ScriptedMemd& server,
                                                       const std::string& secret,
                                                       uint32_t op_timeout_ms) {
  memd::RemoteClientOptions o;
  o.servers = {server.endpoint()};
  o.secret = secret;
  o.connections = 1;
  o.connect_timeout_ms = 1000;
  o.op_timeout_ms = op_timeout_ms;
  o.reconnect_backoff_ms = 1;
  o.reconnect_backoff_max_ms = 1;
  return o;
}

// Every answer a client call gets, per item: the first status and byte
// count, how many times the item was answered (the contract is exactly
// once), answers for items outside the call, and when the last item was
// answered. The state is shared with the callbacks, which may outlive this
// object.
class ItemResults {
 public:
  struct Item {
    Status status;
    uint64_t bytes = 0;
    int calls = 0;
  };
  explicit ItemResults(size_t n) : st_(std::make_shared<State>()) {
    st_->items.resize(n);
    st_->left = n;
  }
  memd::ItemDone Done() const {
    return [st = st_](size_t i, const Status& s, uint64_t bytes) {
      std::lock_guard<std::mutex> lock(st->mu);
      if (i >= st->items.size()) {
        ++st->out_of_range;
        return;
      }
      Item& item = st->items[i];
      if (item.calls++ != 0) return;
      item.status = s;
      item.bytes = bytes;
      if (--st->left == 0) {
        st->finished = std::chrono::steady_clock::now();
        st->cv.notify_all();
      }
    };
  }
  // False when some item is still unanswered after `limit`.
  bool WaitFor(std::chrono::milliseconds limit) const {
    std::unique_lock<std::mutex> lock(st_->mu);
    return st_->cv.wait_for(lock, limit, [&] { return st_->left == 0; });
  }
  // REQUIRES: WaitFor returned true (else an unanswered item reads as OK).
  Status status(size_t i) const { return item(i).status; }
  Item item(size_t i) const {
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->items[i];
  }
  int out_of_range() const {
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->out_of_range;
  }
  std::chrono::steady_clock::time_point finished() const {
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->finished;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Item> items;
    size_t left = 0;
    int out_of_range = 0;
    std::chrono::steady_clock::time_point finished;
  };
  std::shared_ptr<State> st_;
};

}  // namespace kvtier::testing
