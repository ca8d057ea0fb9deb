// MemdServer (memd_server.h): the listener and its sessions, the RDMA
// device and the pool's registration, lease expiry, start and stop.
#include "tiers/remote/memd_server.h"

#include <sys/resource.h>

#include <algorithm>

#include "tiers/remote/memd_server_impl.h"

namespace kvtier::internal::memd {
namespace {

// Expired leases are ended on this tick (transport: rdma).
constexpr auto kLeaseTick = std::chrono::milliseconds(20);
// After a failed accept (no descriptor, no buffer), the next try waits this
// long: the pending connection stays queued, and retrying at once would
// fail the same way in a busy loop.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

// How often deadlines are checked: a quarter of the shortest, 5 to 250 ms,
// so a deadline is overrun by at most that.
std::chrono::milliseconds DeadlineTick(const MemdServerOptions& o) {
  const uint64_t shortest = std::min({o.handshake_timeout_ms, o.put_timeout_ms, o.reply_timeout_ms,
                                      static_cast<uint32_t>(kCloseGraceMs)});
  return std::chrono::milliseconds(std::clamp<uint64_t>(shortest / 4, 5, 250));
}

// Each connection is a descriptor: below max_connections plus what the
// server needs besides, accepts fail (and are retried) before the
// connection limit is reached.
void WarnOnDescriptorLimit(const MemdServerOptions& o, LogSink& log) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return;
  const uint64_t need = uint64_t{o.max_connections} + kSpareDescriptors;
  if (r.rlim_cur >= need) return;
  log.Log(LogLevel::kWarning,
          "memd: max_connections is " + std::to_string(o.max_connections) +
              " but the open-file limit (RLIMIT_NOFILE) is " + std::to_string(r.rlim_cur) +
              "; accepts will fail near that many connections (raise it to at least " +
              std::to_string(need) + ", e.g. ulimit -n)");
}

}  // namespace

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
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
    // A client that gave up while queued costs nothing to skip.
    if (ec && ec != asio::error::connection_aborted) return AcceptFailed(ec);
    // The next accept is armed first: a connection that cannot be set up
    // (out of memory) must not stop the listener.
    Accept();
    if (ec) return;
    std::shared_ptr<Session> s;
    try {
      s = std::make_shared<Session>(*this, std::move(sock));
      sessions_.emplace(s.get(), s);
      if (sessions_.size() - turned_away_ > options_.max_connections) MakeRoomFor(s.get());
      if (sessions_.contains(s.get())) s->Start();
    } catch (...) {
      if (s) s->Close();  // leaves sessions_; a socket not yet in one just closes
      throw;              // logged by the loop
    }
  });
}

void MemdServer::Impl::MakeRoomFor(Session* fresh) {
  const std::string limit =
      "connection limit of " + std::to_string(options_.max_connections) + " reached";
  Session* oldest = nullptr;
  for (const auto& [s, owner] : sessions_) {
    if (s == fresh || s->turned_away() || !s->handshaking()) continue;
    if (oldest == nullptr || s->accepted_ms() < oldest->accepted_ms()) oldest = s;
  }
  uint64_t held = 0;
  const bool warn = limit_warnings_.Pass(NowMs(), &held);
  if (oldest != nullptr) {
    if (warn) {
      log_->Log(LogLevel::kWarning, "memd: " + limit +
                                        "; a connection still in its handshake gives way to a "
                                        "new one" +
                                        WarningGate::Held(held));
    }
    return TurnAway(oldest, limit + " before this connection completed its handshake");
  }
  if (warn)
    log_->Log(LogLevel::kWarning,
              "memd: " + limit + "; refusing a client" + WarningGate::Held(held));
  TurnAway(fresh, limit + "; retry later or raise max_connections");
}

void MemdServer::Impl::TurnAway(Session* s, const std::string& why) {
  if (turned_away_ >= kMaxTurnedAway) return s->Close();
  s->TurnAway(why);  // first: copying the reason may throw, and Forget counts by the flag
  ++turned_away_;
}

void MemdServer::Impl::AcceptFailed(const boost::system::error_code& ec) {
  if (uint64_t held = 0; accept_warnings_.Pass(NowMs(), &held)) {
    log_->Log(LogLevel::kWarning, "memd: " + FromAsio(ec, "accept").ToString() +
                                      "; retrying every " + std::to_string(kAcceptRetry.count()) +
                                      " ms" + WarningGate::Held(held));
  }
  accept_timer_.expires_after(kAcceptRetry);
  accept_timer_.async_wait([this](const boost::system::error_code& waited) {
    if (waited || !acceptor_.is_open()) return;
    Accept();
  });
}

void MemdServer::Impl::Forget(Session* s) {
  if (s->turned_away()) --turned_away_;
  sessions_.erase(s);
}

Status MemdServer::Impl::UseRdma(std::unique_ptr<RdmaDevice> device) {
  rdma_ = std::move(device);
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
    ExpireLeases();  // first: a tick that throws must not end the ticks
    const uint64_t now = NowMs();
    for (auto& [p, s] : sessions_) s->ExpireLeases(now);
  });
}

void MemdServer::Impl::EnforceDeadlines() {
  deadline_timer_.expires_after(DeadlineTick(options_));
  deadline_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !acceptor_.is_open()) return;
    EnforceDeadlines();  // first: a tick that throws must not end the ticks
    const uint64_t now = NowMs();
    // A copy: an overdue session is closed and leaves sessions_.
    auto all = sessions_;
    for (auto& [p, s] : all) s->CheckDeadlines(now);
  });
}

void MemdServer::Impl::Stop() {
  std::call_once(stopped_, [this] {
    const Status closed = loop_.Call([this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      lease_timer_.cancel();
      deadline_timer_.cancel();
      accept_timer_.cancel();
      closed_.swap(sessions_);
      for (auto& [p, s] : closed_) s->Close();
    });
    if (!closed.ok()) {
      try {
        log_->Log(LogLevel::kWarning, "kvtier-memd stop: " + closed.ToString());
      } catch (...) {  // the line is lost, not the stop
      }
    }
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
  if (max_connections == 0 || max_connections > kMaxConnectionsLimit) {
    return Status::InvalidArgument("max_connections is " + std::to_string(max_connections) +
                                   "; expected 1 to " + std::to_string(kMaxConnectionsLimit));
  }
  if (handshake_timeout_ms == 0 || put_timeout_ms == 0 || reply_timeout_ms == 0) {
    return Status::InvalidArgument(
        "handshake_timeout_ms, put_timeout_ms and reply_timeout_ms must be at least 1");
  }
  if (lease_ms == 0 || lease_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("lease_ms is " + std::to_string(lease_ms) + "; expected 1 to " +
                                   std::to_string(kMaxLeaseMs));
  }
  return pool.Validate();
}

Result<std::unique_ptr<MemdServer>> MemdServer::Start(const MemdServerOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  // The device is opened once, before the pool is mapped: a machine without
  // one fails at once, with the reason that names transport: tcp.
  std::unique_ptr<RdmaDevice> device;
  if (options.transport == "rdma") {
    auto opened = options.rdma_device ? options.rdma_device() : OpenRdmaDevice();
    if (!opened.ok()) return opened.status();
    device = std::move(opened).value();
  }
  std::shared_ptr<LogSink> log = options.log ? options.log : StderrLogSink();
  WarnOnDescriptorLimit(options, *log);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<MemdPool> pool,
                          MemdPool::Create(options.pool, log.get()));
  auto impl = std::make_unique<Impl>(options, std::move(pool));
  if (device) {
    if (Status s = impl->UseRdma(std::move(device)); !s.ok()) {
      impl->Stop();
      return s;
    }
  }
  Status listen;
  if (Status ran = impl->loop_.Call([&] {
        listen = impl->Listen();
        if (listen.ok()) impl->Accept();
        if (listen.ok()) impl->EnforceDeadlines();
        if (listen.ok() && impl->rdma_) impl->ExpireLeases();
      });
      !ran.ok()) {
    listen = ran;
  }
  if (!listen.ok()) {
    impl->Stop();
    return listen;
  }
  return std::unique_ptr<MemdServer>(new MemdServer(std::move(impl)));
}

size_t MemdServer::TEST_QueuedReplies() {
  size_t n = 0;
  const Status ran = impl_->loop_.Call([&] {
    for (auto& [p, s] : impl_->sessions_) n += s->queued_replies();
  });
  return ran.ok() ? n : 0;
}

uint64_t MemdServer::TEST_QueuedReplyHeapBytes() {
  uint64_t n = 0;
  const Status ran = impl_->loop_.Call([&] {
    for (auto& [p, s] : impl_->sessions_) n += s->queued_heap_bytes();
  });
  return ran.ok() ? n : 0;
}

size_t MemdServer::TEST_Connections() {
  size_t n = 0;
  const Status ran = impl_->loop_.Call([&] { n = impl_->sessions_.size(); });
  return ran.ok() ? n : 0;
}

uint16_t MemdServer::port() const { return impl_->port_; }

void MemdServer::Stop() { impl_->Stop(); }

Stats MemdServer::GetStats() {
  Stats stats;
  const Status ran = impl_->loop_.Call([&] { stats = impl_->pool_->GetStats(); });
  if (ran.ok()) return stats;
  if (ran.code() != StatusCode::kUnavailable) {
    impl_->log_->Log(LogLevel::kError, "memd stats: " + ran.ToString());
    return stats;
  }
  // Stopping or stopped: the loop took nothing. Stop returns once the loop
  // thread is joined (call_once waits for a Stop in progress); the pool is
  // then touched by nobody else.
  Stop();
  return impl_->pool_->GetStats();
}

}  // namespace kvtier::internal::memd
