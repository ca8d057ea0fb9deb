#include "tiers/remote/memd_server.h"

#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <future>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "io/asio_loop.h"
#include "tiers/remote/memd_reservations.h"
#include "tiers/remote/rdma_session.h"
#include "tiers/remote/remote_auth.h"

namespace kvtier::internal::memd {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Reservations a connection may hold at once (PUT_BEGIN items not yet
// committed, TCP and RDMA together): four full batches. A client that asks
// for more is cut off, so one connection cannot pin the whole pool.
constexpr size_t kMaxReservedItems = 4 * kMaxBatchItems;
constexpr size_t kDiscardChunk = 64 * 1024;
constexpr size_t kMaxFramesPerWrite = 64;
// Expired leases are ended on this tick (transport: rdma).
constexpr auto kLeaseTick = std::chrono::milliseconds(20);

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

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
  Status OpenRdma();
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

void Session::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(in_header_), TransferAllBulk(),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     if (Alive(ec, "read")) OnHeader();
                   });
}

bool Session::Alive(const boost::system::error_code& ec, const char* what) {
  if (closed_) return false;
  if (ec) {
    // A peer that hangs up between frames is routine; mid-frame it is not.
    if (ec != asio::error::eof) {
      srv_.log_->Log(LogLevel::kDebug, "memd: " + peer_ + ": " + FromAsio(ec, what).ToString());
    }
    Close();
    return false;
  }
  return true;
}

void Session::OnHeader() {
  auto h = DecodeFrameHeader(in_header_, srv_.pool_->slot_bytes());
  if (!h.ok())
    return ProtocolError(StatusCode::kInvalidArgument, std::string(h.status().message()));
  frame_ = *h;
  if (frame_.opcode == Opcode::kPutData) {
    if (phase_ != Phase::kReady)
      return ProtocolError(StatusCode::kInvalidArgument, "not authenticated");
    return ReadPutData();
  }
  ReadBody();
}

void Session::ReadBody() {
  body_.resize(frame_.body_bytes);
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(body_), TransferAllBulk(),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     if (Alive(ec, "read body")) Dispatch();
                   });
}

void Session::ReadPutData() {
  auto r = reservations_.Fill(frame_.request_id, frame_.item, frame_.body_bytes);
  if (!r.ok()) return ProtocolError(r.status().code(), std::string(r.status().message()));
  if (r->slot < 0) return Discard(frame_.body_bytes);
  auto self = shared_from_this();
  std::span<std::byte> dst = srv_.pool_->SlotBytes(static_cast<uint32_t>(r->slot), r->stored_bytes);
  asio::async_read(sock_, asio::buffer(dst.data(), dst.size()), TransferAllBulk(),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     if (Alive(ec, "read block")) ReadHeader();
                   });
}

// The data of an item whose reservation failed still arrives (the client
// streams without waiting for grants); read and drop it.
void Session::Discard(size_t left) {
  if (left == 0) return ReadHeader();
  scratch_.resize(kDiscardChunk);
  const size_t n = std::min(left, scratch_.size());
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(scratch_.data(), n), TransferAllBulk(),
                   [this, self, left, n](const boost::system::error_code& ec, size_t) {
                     if (Alive(ec, "discard")) Discard(left - n);
                   });
}

void Session::Dispatch() {
  if (phase_ != Phase::kReady) return Handshake();
  const Opcode op = frame_.opcode;
  if (WantsRdma(op)) return HandleRdma();
  if (op == Opcode::kPutBegin) {
    auto m = DecodePutBegin(body_);
    if (!m.ok())
      return ProtocolError(StatusCode::kInvalidArgument, std::string(m.status().message()));
    Begin(*m);
  } else if (op == Opcode::kPutCommit || op == Opcode::kStats) {
    if (!body_.empty()) return ProtocolError(StatusCode::kInvalidArgument, "unexpected body");
    if (op == Opcode::kPutCommit) {
      Commit();
    } else {
      Send(Opcode::kStatsReply, EncodeBody(srv_.pool_->GetStats()));
    }
  } else if (op == Opcode::kGet || op == Opcode::kExists || op == Opcode::kRemove) {
    auto m = DecodeKeyBatch(body_);
    if (!m.ok())
      return ProtocolError(StatusCode::kInvalidArgument, std::string(m.status().message()));
    if (op == Opcode::kGet) {
      Get(*m);
    } else {
      StatusList out;
      for (const BlockKey& k : m->keys) {
        const bool hit = op == Opcode::kExists ? srv_.pool_->Contains(m->ns, k)
                                               : (srv_.pool_->Remove(m->ns, k), true);
        out.codes.push_back(hit ? StatusCode::kOk : StatusCode::kNotFound);
      }
      Send(Opcode::kStatusReply, EncodeBody(out));
    }
  } else {
    return ProtocolError(StatusCode::kInvalidArgument,
                         "opcode " + std::to_string(static_cast<int>(op)) + " is not a request");
  }
  if (!closing_) ReadHeader();
}

bool Session::WantsRdma(Opcode op) const {
  if (rdma_) return rdma_->Handles(op);
  return op == Opcode::kRdmaHello || op == Opcode::kGetLease || op == Opcode::kLeaseRelease;
}

void Session::HandleRdma() {
  if (!srv_.rdma_) {
    return ProtocolError(StatusCode::kNotSupported,
                         "this kvtier-memd serves transport: tcp only; RDMA frames are refused");
  }
  if (!rdma_) {
    RdmaSession::Options o;
    o.pool_region = srv_.pool_mr_->region();
    o.lease_ms = srv_.options_.lease_ms;
    rdma_ = std::make_unique<RdmaSession>(*srv_.pool_, *srv_.rdma_, reservations_, o);
  }
  auto reply = rdma_->Handle(frame_.opcode, frame_.request_id, body_, NowMs());
  if (!reply.ok()) {
    return ProtocolError(reply.status().code(), std::string(reply.status().message()));
  }
  if (*reply) Send((*reply)->op, std::move((*reply)->body));
  if (!closing_) ReadHeader();
}

void Session::Handshake() {
  if (phase_ == Phase::kHello && frame_.opcode == Opcode::kHello) {
    auto m = DecodeHello(body_);
    if (!m.ok())
      return ProtocolError(StatusCode::kInvalidArgument, std::string(m.status().message()));
    client_nonce_ = m->nonce;
    server_nonce_ = RandomNonce();
    Send(Opcode::kChallenge, EncodeBody(Challenge{server_nonce_, srv_.instance_id_}));
    phase_ = Phase::kAuth;
    return ReadHeader();
  }
  if (phase_ == Phase::kAuth && frame_.opcode == Opcode::kAuth) {
    auto m = DecodeAuth(body_);
    if (!m.ok())
      return ProtocolError(StatusCode::kInvalidArgument, std::string(m.status().message()));
    if (!SameMac(m->mac, ClientProof(srv_.options_.secret, server_nonce_, client_nonce_))) {
      return ProtocolError(StatusCode::kInvalidArgument, "authentication failed");
    }
    Welcome w;
    w.mac = ServerProof(srv_.options_.secret, server_nonce_, client_nonce_);
    w.slot_bytes = srv_.pool_->slot_bytes();
    w.slot_count = srv_.pool_->slot_count();
    Send(Opcode::kWelcome, EncodeBody(w));
    phase_ = Phase::kReady;
    return ReadHeader();
  }
  ProtocolError(StatusCode::kInvalidArgument, "handshake expected (HELLO, then AUTH)");
}

void Session::Begin(const PutBegin& m) {
  auto items = reservations_.Begin(frame_.request_id, PutPath::kTcp, m);
  if (!items.ok()) {
    return ProtocolError(items.status().code(), std::string(items.status().message()));
  }
  StatusList reply;
  for (const Reservation& r : *items) reply.codes.push_back(r.code);
  Send(Opcode::kBeginReply, EncodeBody(reply));
}

void Session::Commit() {
  auto reply = reservations_.Commit(frame_.request_id);
  if (!reply.ok()) {
    return ProtocolError(reply.status().code(), std::string(reply.status().message()));
  }
  Send(Opcode::kStatusReply, EncodeBody(*reply));
}

void Session::Get(const KeyBatch& m) {
  for (size_t i = 0; i < m.keys.size(); ++i) {
    const auto item = static_cast<uint16_t>(i);
    auto found = srv_.pool_->Lookup(m.ns, m.keys[i]);
    if (!found) {
      Send(Opcode::kGetStatus, {static_cast<std::byte>(EncodeCode(StatusCode::kNotFound))}, item);
      continue;
    }
    // The slot stays pinned until its bytes are on the socket.
    srv_.pool_->Pin(found->slot);
    Out out;
    out.header = EncodeFrameHeader(
        {Opcode::kGetData, item, frame_.request_id, static_cast<uint32_t>(found->stored_bytes)});
    out.data = srv_.pool_->SlotBytes(found->slot, found->stored_bytes);
    out.pin = found->slot;
    queue_.push_back(std::move(out));
  }
  Pump();
}

void Session::Send(Opcode op, std::vector<std::byte> body, uint16_t item) {
  Out out;
  out.header = EncodeFrameHeader({op, item, frame_.request_id, static_cast<uint32_t>(body.size())});
  out.body = std::move(body);
  queue_.push_back(std::move(out));
  Pump();
}

void Session::Pump() {
  if (!writing_.empty() || queue_.empty() || closed_) return;
  while (!queue_.empty() && writing_.size() < kMaxFramesPerWrite) {
    writing_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  std::vector<asio::const_buffer> bufs;
  for (const Out& o : writing_) {
    bufs.emplace_back(o.header.data(), o.header.size());
    if (!o.body.empty()) bufs.emplace_back(o.body.data(), o.body.size());
    if (!o.data.empty()) bufs.emplace_back(o.data.data(), o.data.size());
  }
  auto self = shared_from_this();
  asio::async_write(sock_, bufs, TransferAllBulk(),
                    [this, self](const boost::system::error_code& ec, size_t) {
                      for (const Out& o : writing_) {
                        if (o.pin >= 0) srv_.pool_->Unpin(static_cast<uint32_t>(o.pin));
                      }
                      writing_.clear();
                      if (closed_) return;
                      if (ec || (closing_ && queue_.empty())) return Close();
                      Pump();
                    });
}

void Session::ProtocolError(StatusCode code, const std::string& why) {
  srv_.log_->Log(LogLevel::kWarning, "memd: " + peer_ + ": " + why + "; closing the connection");
  // RDMA grants wait for Close(): the peer may still be writing into them
  // until the queue pair is destroyed.
  reservations_.Cancel(PutPath::kTcp);
  // Nothing queued after the error is sent: drop queued GET frames (and
  // their pins) so the error is the last thing the peer reads.
  for (const Out& o : queue_) {
    if (o.pin >= 0) srv_.pool_->Unpin(static_cast<uint32_t>(o.pin));
  }
  queue_.clear();
  closing_ = true;
  Send(Opcode::kError, EncodeBody(ErrorReply{code, why}));
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  // Destroys the queue pair, then returns its grants and leases.
  rdma_.reset();
  reservations_.Cancel();
  for (const Out& o : queue_) {
    if (o.pin >= 0) srv_.pool_->Unpin(static_cast<uint32_t>(o.pin));
  }
  queue_.clear();
  boost::system::error_code ec;
  sock_.shutdown(tcp::socket::shutdown_both, ec);
  sock_.close(ec);
  // Frames being written keep their pins until the write handler runs.
  srv_.Forget(this);
}

Status MemdServer::Impl::Listen() {
  KVTIER_ASSIGN_OR_RETURN(tcp::endpoint ep, ParseTcpEndpoint(options_.listen, true));
  boost::system::error_code ec;
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) TuneBulkSocket(acceptor_);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return FromAsio(ec, "memd listen on " + options_.listen);
  port_ = acceptor_.local_endpoint(ec).port();
  return Status::Ok();
}

void MemdServer::Impl::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      if (sessions_.size() >= options_.max_connections) {
        log_->Log(LogLevel::kWarning, "memd: connection limit reached; refusing a client");
      } else {
        auto s = std::make_shared<Session>(*this, std::move(sock));
        sessions_.emplace(s.get(), s);
        s->Start();
      }
    }
    Accept();
  });
}

void MemdServer::Impl::Forget(Session* s) { sessions_.erase(s); }

Status MemdServer::Impl::OpenRdma() {
  auto device = options_.rdma_device ? options_.rdma_device() : OpenRdmaDevice();
  if (!device.ok()) return device.status();
  rdma_ = std::move(device).value();
  auto mr = rdma_->Register(pool_->mapping());
  if (!mr.ok()) return mr.status().WithContext("memd: registering the pool for RDMA");
  pool_mr_ = std::move(mr).value();
  return Status::Ok();
}

// One timer for every session: a lease outlives its end by at most a tick.
void MemdServer::Impl::ExpireLeases() {
  lease_timer_.expires_after(kLeaseTick);
  lease_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !acceptor_.is_open()) return;
    const uint64_t now = NowMs();
    for (auto& [p, s] : sessions_) s->ExpireLeases(now);
    ExpireLeases();
  });
}

void MemdServer::Impl::Stop() {
  std::call_once(stopped_, [this] {
    std::promise<void> closed;
    loop_.Post([this, &closed] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      lease_timer_.cancel();
      auto all = sessions_;
      for (auto& [p, s] : all) s->Close();
      closed.set_value();
    });
    closed.get_future().wait();
    loop_.Stop();
  });
}

MemdServer::MemdServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MemdServer::~MemdServer() { Stop(); }

Status MemdServerOptions::Validate() const {
  if (secret.empty()) return Status::InvalidArgument("memd needs a shared secret (--secret-file)");
  if (transport != "tcp" && transport != "rdma") {
    return Status::InvalidArgument("transport '" + transport +
                                   "' is unknown; expected tcp or rdma");
  }
  if (max_connections == 0) return Status::InvalidArgument("max_connections must be at least 1");
  if (lease_ms == 0 || lease_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("lease_ms is " + std::to_string(lease_ms) + "; expected 1 to " +
                                   std::to_string(kMaxLeaseMs));
  }
  return pool.Validate();
}

Result<std::unique_ptr<MemdServer>> MemdServer::Start(const MemdServerOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  if (options.transport == "rdma" && !options.rdma_device) {
    KVTIER_RETURN_IF_ERROR(ProbeRdmaTransport());
  }
  std::shared_ptr<LogSink> log = options.log ? options.log : StderrLogSink();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<MemdPool> pool,
                          MemdPool::Create(options.pool, log.get()));
  auto impl = std::make_unique<Impl>(options, std::move(pool));
  if (options.transport == "rdma") {
    if (Status s = impl->OpenRdma(); !s.ok()) {
      impl->Stop();
      return s;
    }
  }
  Status listen;
  std::promise<void> done;
  impl->loop_.Post([&] {
    listen = impl->Listen();
    if (listen.ok()) impl->Accept();
    if (listen.ok() && impl->rdma_) impl->ExpireLeases();
    done.set_value();
  });
  done.get_future().wait();
  if (!listen.ok()) {
    impl->Stop();
    return listen;
  }
  return std::unique_ptr<MemdServer>(new MemdServer(std::move(impl)));
}

uint16_t MemdServer::port() const { return impl_->port_; }

void MemdServer::Stop() { impl_->Stop(); }

Stats MemdServer::GetStats() {
  std::promise<Stats> p;
  impl_->loop_.Post([&] { p.set_value(impl_->pool_->GetStats()); });
  return p.get_future().get();
}

}  // namespace kvtier::internal::memd
