// One connection of the remote client (Link): connecting, the HMAC
// handshake, the deadline tick and tearing the connection down.
#include <algorithm>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "tiers/remote/remote_client_impl.h"

namespace kvtier::internal::memd {
namespace {

// Deadlines are checked on this tick while a connection has work.
constexpr auto kTick = std::chrono::milliseconds(10);

}  // namespace

Link::Link(ClientImpl& c, ServerState& s, Channel& ch)
    : c_(c),
      s_(s),
      ch_(ch),
      sock_(c.loop_.context()),
      timer_(c.loop_.context()),
      next_id_(std::max<uint32_t>(c.first_request_id_, 1)) {}

std::string Link::Prefix() const { return "remote server " + s_.endpoint + ": "; }

bool Link::Live(const boost::system::error_code& ec, const char* what) {
  if (dead_) return false;
  if (ec) {
    Abort(FromAsio(ec, Prefix() + what));
    return false;
  }
  return true;
}

void Link::Connect() {
  connect_deadline_ = SteadyClock::now() + std::chrono::milliseconds(c_.o_.connect_timeout_ms);
  Tick();
  // A named server's address is refreshed for the next connect; this one
  // goes to the last address known, so a slow lookup holds nothing up.
  c_.LookUp(s_);
  auto self = shared_from_this();
  boost::system::error_code opened;
  sock_.open(s_.ep.protocol(), opened);
  if (opened) return Abort(FromAsio(opened, Prefix() + "socket"));
  TuneBulkSocket(sock_);
  sock_.async_connect(s_.ep, [this, self](const boost::system::error_code& ec) {
    if (!Live(ec, "connect")) return;
    boost::system::error_code ignored;
    sock_.set_option(tcp::no_delay(true), ignored);
    client_nonce_ = RandomNonce();
    hs_out_ = Frame(Opcode::kHello, 0, EncodeBody(Hello{kProtocolVersion, client_nonce_}));
    asio::async_write(sock_, asio::buffer(hs_out_), TransferAllBulk(),
                      [this, self](const boost::system::error_code& e, size_t) {
                        if (!Live(e, "send HELLO")) return;
                        ReadControl([this](const FrameHeader& h) {
                          if (h.opcode != Opcode::kChallenge) return OnControl(h);
                          auto ch = DecodeChallenge(body_);
                          if (!ch.ok()) return Bad(std::string(ch.status().message()));
                          Handshake(*ch);
                        });
                      });
  });
}

void Link::Handshake(const Challenge& c) {
  hs_out_ =
      Frame(Opcode::kAuth, 0, EncodeBody(Auth{ClientProof(c_.o_.secret, c.nonce, client_nonce_)}));
  auto self = shared_from_this();
  const Challenge challenge = c;
  asio::async_write(
      sock_, asio::buffer(hs_out_),
      [this, self, challenge](const boost::system::error_code& e, size_t) {
        if (!Live(e, "send AUTH")) return;
        ReadControl([this, challenge](const FrameHeader& h) {
          if (h.opcode != Opcode::kWelcome) return OnControl(h);
          auto w = DecodeWelcome(body_);
          if (!w.ok()) return Bad(std::string(w.status().message()));
          if (!SameMac(w->mac, ServerProof(c_.o_.secret, challenge.nonce, client_nonce_))) {
            return Abort(
                Status::InvalidArgument(Prefix() + "server failed to prove the shared secret"));
          }
          // The slot size caps every block frame this link reads: one the
          // server could not hold either is refused, not allocated.
          if (w->slot_bytes <= kBlockHeaderBytes ||
              w->slot_bytes > kMaxBlockPayloadBytes + kBlockHeaderBytes) {
            return Abort(Status::InvalidArgument(
                Prefix() + "server announced a slot of " + std::to_string(w->slot_bytes) +
                " bytes; expected more than " + std::to_string(kBlockHeaderBytes) +
                " and at most " + std::to_string(kMaxBlockPayloadBytes + kBlockHeaderBytes)));
          }
          slot_bytes_ = w->slot_bytes;
          if (c_.rdma_) return StartRdma(challenge.instance_id);
          Ready(challenge.instance_id);
        });
      });
}

void Link::Ready(uint64_t instance) {
  ready_ = true;
  // Requests that waited for the handshake are timed from now: the
  // connection is connect_timeout_ms's to make (CheckDeadlines), and they
  // have sent nothing yet.
  // Re-keyed in place: nothing is allocated, so nothing can fail half way.
  const auto now = SteadyClock::now();
  last_progress_ = now;
  for (auto& [id, r] : pending_) {
    auto node = deadlines_.extract({r->deadline, id});
    const auto slack = r->cap - r->deadline;
    r->deadline = now + std::chrono::milliseconds(c_.o_.op_timeout_ms);
    r->cap = r->deadline + slack;
    if (node.empty()) continue;
    node.value() = {r->deadline, id};
    deadlines_.insert(std::move(node));
  }
  c_.OnReady(s_, ch_, this, instance);
  if (dead_) return;
  for (uint32_t id : waiting_) {
    if (auto it = pending_.find(id); it != pending_.end()) Start(*it->second);
  }
  waiting_.clear();
  Pump();
  ReadHeader();
}

void Link::ReadControl(std::function<void(const FrameHeader&)> then) {
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(in_header_), TransferAllBulk(),
                   [this, self, then](const boost::system::error_code& ec, size_t) {
                     if (!Live(ec, "handshake read")) return;
                     auto h = DecodeFrameHeader(in_header_, 0);
                     if (!h.ok()) return Bad(std::string(h.status().message()));
                     body_.resize(h->body_bytes);
                     asio::async_read(
                         sock_, asio::buffer(body_),
                         [this, self, then, hdr = *h](const boost::system::error_code& e, size_t) {
                           if (Live(e, "handshake read")) then(hdr);
                         });
                   });
}

void Link::Tick() {
  if (ticking_ || dead_) return;
  ticking_ = true;
  timer_.expires_after(kTick);
  auto self = shared_from_this();
  timer_.async_wait([this, self](const boost::system::error_code&) {
    ticking_ = false;
    if (dead_) return;
    try {
      CheckDeadlines();
    } catch (...) {
      // Out of memory building a status: the next tick tries again, or no
      // deadline of this link would be checked until a new request came.
      if (!dead_) Tick();
    }
  });
}

void Link::CheckDeadlines() {
  const auto now = SteadyClock::now();
  if (!ready_ && now >= connect_deadline_) {
    s_.silent = true;
    return Abort(Status::Unavailable(Prefix() + "no connection within " +
                                     std::to_string(c_.o_.connect_timeout_ms) + " ms"));
  }
  // A reply past its deadline is late once the connection has moved no
  // byte for op_timeout_ms (a server that stopped), or past its cap: a
  // connection busy with large blocks may take longer than op_timeout_ms
  // for a request and those queued ahead of it, but not forever. Before
  // Ready nothing is sent: what waits is timed from then.
  const bool stalled = now - last_progress_ >= std::chrono::milliseconds(c_.o_.op_timeout_ms);
  std::set<uint32_t> late;
  for (const auto& [when, id] : deadlines_) {
    if (!ready_ || when > now) break;
    const auto it = pending_.find(id);
    if (stalled || it == pending_.end() || it->second->cap <= now) late.insert(id);
  }
  if (!late.empty()) {
    // The connection is given up for the late ones; requests whose own
    // time is not up fail as a dropped connection, saying why.
    const std::string ms = std::to_string(c_.o_.op_timeout_ms) + " ms";
    const Status own = Status::DeadlineExceeded(Prefix() + "no reply within " + ms);
    const Status dropped = Status::Unavailable(
        Prefix() + "connection dropped: an earlier request on it got no reply within " + ms);
    s_.silent = true;
    return Abort(own, [&](uint32_t id) { return late.count(id) != 0 ? own : dropped; });
  }
  // RDMA operations a full completion queue held back are retried on each
  // completion of this link; when none is in flight, here.
  if (rdma_) rdma_->Drain();
  if (dead_) return;
  if (!ready_ || !pending_.empty()) Tick();
}

void Link::Abort(const Status& s, const std::function<Status(uint32_t id)>& status_of) {
  if (dead_) return;
  dead_ = true;
  const bool was_ready = ready_;
  // Closing first: after this no buffer of a pending request is touched, so
  // the callbacks below may let their owners free them.
  boost::system::error_code ec;
  sock_.close(ec);
  // The queue pair goes too: no RDMA operation touches a buffer after this.
  rdma_.reset();
  timer_.cancel();
  queue_.clear();
  std::map<uint32_t, RequestPtr> pending;
  pending.swap(pending_);
  deadlines_.clear();
  owed_bytes_ = 0;
  waiting_.clear();
  held_puts_.clear();
  begun_items_ = 0;
  auto self = shared_from_this();  // the channel may drop its reference below
  try {
    c_.OnDead(s_, ch_, this, was_ready, s);
  } catch (...) {  // out of memory for its log line: the channel has let go all the same
  }
  for (auto& [id, r] : pending) r->FailAll(status_of ? status_of(id) : s);
}

}  // namespace kvtier::internal::memd
