// MemdServer's internals (memd_server.h), shared by the files that
// implement it:
//   memd_server.cc    the listener, RDMA setup, lease expiry, start and stop
//   memd_session.cc   one connection: reading frames, writing replies, closing
//   memd_dispatch.cc  the handshake and the requests a session serves
// Sessions and the listener run on the server's I/O thread; Start() and
// Stop() set up and tear down from the caller's.
// Only those files include this header (it pulls in Boost.Asio).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "io/asio_loop.h"
#include "tiers/remote/memd_reservations.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/rdma_session.h"
#include "tiers/remote/remote_auth.h"

namespace kvtier::internal::memd {

namespace asio = boost::asio;
using asio::ip::tcp;

// Reservations a connection may hold at once (PUT_BEGIN items not yet
// committed, TCP and RDMA together): four full batches. A client that asks
// for more is cut off, so one connection cannot pin the whole pool.
constexpr size_t kMaxReservedItems = 4 * kMaxBatchItems;

// Milliseconds on the steady clock: the time leases are measured in.
uint64_t NowMs();

class Session;

class MemdServer::Impl {
 public:
  Impl(MemdServerOptions options, std::unique_ptr<MemdPool> pool)
      : options_(std::move(options)),
        log_(options_.log ? options_.log : StderrLogSink()),
        pool_(std::move(pool)),
        instance_id_(RandomId()),
        loop_("memd", log_),
        acceptor_(loop_.context()),
        lease_timer_(loop_.context()) {}

  Status Listen();
  void Accept();
  // Keeps the opened device and registers the pool with it.
  Status UseRdma(std::unique_ptr<RdmaDevice> device);
  void ExpireLeases();
  void Stop();
  void Forget(Session* s);

  const MemdServerOptions options_;
  std::shared_ptr<LogSink> log_;
  // Declared before the loop: sessions die with the loop's handlers, and the
  // pool must outlive them.
  std::unique_ptr<MemdPool> pool_;
  // transport: rdma. Sessions' queue pairs die before the region and the
  // device (sessions_ and the loop are declared after them).
  std::unique_ptr<RdmaDevice> rdma_;
  std::unique_ptr<RdmaMemory> pool_mr_;
  const uint64_t instance_id_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;  // loop thread only
  AsioLoop loop_;
  tcp::acceptor acceptor_;
  asio::steady_timer lease_timer_;
  uint16_t port_ = 0;
  std::once_flag stopped_;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(MemdServer::Impl& srv, tcp::socket sock)
      : srv_(srv), sock_(std::move(sock)), reservations_(*srv.pool_, kMaxReservedItems) {
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? "unknown peer" : ep.address().to_string() + ":" + std::to_string(ep.port());
    sock_.set_option(tcp::no_delay(true), ec);
  }

  void Start() { ReadHeader(); }
  void Close();
  void ExpireLeases(uint64_t now_ms) {
    if (rdma_) rdma_->Expire(now_ms);
  }

 private:
  enum class Phase { kHello, kAuth, kReady };
  struct Out {
    FrameHeaderBytes header{};
    std::vector<std::byte> body;
    std::span<const std::byte> data;  // slot bytes sent after the body
    int64_t pin = -1;                 // slot unpinned once sent
  };

  void ReadHeader();
  void OnHeader();
  void ReadBody();
  void Dispatch();
  void ReadPutData();
  void Discard(size_t left);
  void Handshake();
  void Begin(const PutBegin& m);
  void Commit();
  void Get(const KeyBatch& m);
  bool WantsRdma(Opcode op) const;
  void HandleRdma();
  void Send(Opcode op, std::vector<std::byte> body, uint16_t item = 0);
  void Pump();
  void ProtocolError(StatusCode code, const std::string& why);
  bool Alive(const boost::system::error_code& ec, const char* what);

  MemdServer::Impl& srv_;
  tcp::socket sock_;
  std::string peer_;
  Phase phase_ = Phase::kHello;
  Nonce client_nonce_{}, server_nonce_{};
  FrameHeaderBytes in_header_{};
  FrameHeader frame_;
  std::vector<std::byte> body_;
  std::vector<std::byte> scratch_;
  std::deque<Out> queue_;
  std::vector<Out> writing_;
  // Puts of both paths. Declared before rdma_, which grants from it and
  // cancels its grants only once its queue pair is gone.
  MemdReservations reservations_;
  std::unique_ptr<RdmaSession> rdma_;  // created by the first RDMA frame
  bool closing_ = false;               // an ERROR is queued; close once it is sent
  bool closed_ = false;
};

}  // namespace kvtier::internal::memd
