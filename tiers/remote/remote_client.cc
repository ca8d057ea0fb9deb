#include "tiers/remote/remote_client.h"

#include <atomic>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <deque>
#include <future>
#include <map>

#include "io/asio_loop.h"
#include "tiers/remote/rdma_link.h"
#include "tiers/remote/remote_auth.h"

namespace kvtier::internal::memd {

namespace asio = boost::asio;
using asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

namespace {

// Deadlines are checked on this tick while a connection has work.
constexpr auto kTick = std::chrono::milliseconds(10);
constexpr size_t kMaxFramesPerWrite = 64;

struct Request {
  Opcode op = Opcode::kStats;
  uint32_t id = 0;
  NamespaceId ns;
  std::vector<BlockKey> keys;
  std::vector<std::span<std::byte>> dsts;                         // GET
  std::vector<std::span<const std::byte>> srcs;                   // PUT payloads
  std::vector<std::array<std::byte, kBlockHeaderBytes>> headers;  // PUT: sent; GET: received
  std::vector<uint8_t> done;
  size_t remaining = 0;
  ItemDone cb;
  std::function<void(const Stats&)> on_stats;
  SteadyClock::time_point deadline;

  void Init(size_t items, ItemDone fn) {
    done.assign(items, 0);
    remaining = items;
    cb = std::move(fn);
  }
  void Finish(size_t i, const Status& s, uint64_t bytes) {
    if (i >= done.size() || done[i]) return;
    done[i] = 1;
    --remaining;
    cb(i, s, bytes);
  }
  void FailAll(const Status& s) {
    for (size_t i = 0; i < done.size(); ++i) Finish(i, s, 0);
  }
};
using RequestPtr = std::shared_ptr<Request>;

struct OutFrame {
  FrameHeaderBytes header{};
  std::vector<std::byte> body;
  std::span<const std::byte> a, b;  // block header and payload of PUT_DATA
};

}  // namespace

class ClientImpl;
class Link;

struct Channel {
  std::shared_ptr<Link> link;
  SteadyClock::time_point next_attempt{};
  uint32_t backoff_ms = 0;
};

struct ServerState {
  size_t index = 0;
  std::string endpoint;
  tcp::endpoint ep;
  std::vector<Channel> channels;
  size_t next = 0;
  uint64_t instance = 0;
  bool seen = false;
};

// One TCP connection: handshake, then pipelined requests. Lives in a
// shared_ptr held by its channel and by every pending handler.
class Link : public std::enable_shared_from_this<Link> {
 public:
  Link(ClientImpl& c, ServerState& s, Channel& ch);
  void Connect();
  void Submit(RequestPtr r);
  void Abort(const Status& s);
  bool dead() const { return dead_; }

 private:
  void Handshake(const Challenge& c);
  void StartRdma(uint64_t instance);
  void Ready(uint64_t instance);
  bool OnRdmaReply(const FrameHeader& h, Request& r);
  void Granted(uint32_t id, std::vector<Status> items);
  void Leased(uint32_t id, uint64_t lease, std::vector<Status> items, std::vector<uint64_t> bytes);
  void Control(Opcode op, uint32_t id, std::vector<std::byte> body);
  void ReadControl(std::function<void(const FrameHeader&)> then);
  void OnWelcome(const FrameHeader& h);
  void Enqueue(Request& r);
  void Pump();
  void ReadHeader();
  void OnHeader();
  void OnGetData(Request& r, const FrameHeader& h);
  void OnControl(const FrameHeader& h);
  void Done(Request& r);
  Request* Find(uint32_t id, Opcode op, size_t item);
  void Tick();
  void Bad(const std::string& why) { Abort(Status::IOError(Prefix() + "bad reply: " + why)); }
  std::string Prefix() const;
  bool Live(const boost::system::error_code& ec, const char* what);

  ClientImpl& c_;
  ServerState& s_;
  Channel& ch_;
  tcp::socket sock_;
  asio::steady_timer timer_;
  bool ticking_ = false;
  bool ready_ = false;
  bool dead_ = false;
  SteadyClock::time_point connect_deadline_;
  Nonce client_nonce_{};
  uint64_t slot_bytes_ = 0;
  uint32_t next_id_ = 1;
  std::map<uint32_t, RequestPtr> pending_;  // by id: the first has the earliest deadline
  std::vector<uint32_t> waiting_;           // submitted while connecting
  std::deque<OutFrame> queue_;
  std::vector<OutFrame> writing_;
  std::vector<std::byte> hs_out_;
  FrameHeaderBytes in_header_{};
  std::vector<std::byte> body_;
  std::unique_ptr<RdmaLinkPath> rdma_;  // transport: rdma, from the handshake on
};

class ClientImpl final : public RemoteClient {
 public:
  ClientImpl(RemoteClientOptions o, std::shared_ptr<LogSink> log, RestartHook hook)
      : o_(std::move(o)), log_(std::move(log)), hook_(std::move(hook)), loop_("remote", log_) {}
  ~ClientImpl() override { Shutdown(); }

  size_t server_count() const override { return servers_.size(); }
  const std::string& endpoint(size_t i) const override { return servers_[i]->endpoint; }
  void Put(size_t server, NamespaceId ns, std::vector<PutOp> ops, ItemDone done) override;
  void Get(size_t server, NamespaceId ns, std::vector<std::span<std::byte>> dsts,
           std::vector<BlockKey> keys, ItemDone done) override;
  void Exists(size_t server, NamespaceId ns, std::vector<BlockKey> keys, ItemDone done) override {
    Keys(Opcode::kExists, server, ns, std::move(keys), std::move(done));
  }
  void Remove(size_t server, NamespaceId ns, std::vector<BlockKey> keys, ItemDone done) override {
    Keys(Opcode::kRemove, server, ns, std::move(keys), std::move(done));
  }
  Result<Stats> GetStats(size_t server) override;
  uint64_t RegisterHostMemory(std::span<std::byte> memory) override;
  void Shutdown() override;

  void OnReady(ServerState& s, Channel& ch, Link* l, uint64_t instance);
  void OnDead(ServerState& s, Channel& ch, Link* l, bool was_ready, const Status& why);

  const RemoteClientOptions o_;
  std::shared_ptr<LogSink> log_;
  RestartHook hook_;
  // transport: rdma. Declared before servers_: queue pairs and staging
  // regions go before the device. Completions reach the loop through post_,
  // which drops them once the loop has stopped.
  std::unique_ptr<RdmaDevice> rdma_;
  std::shared_ptr<RdmaMemory> arena_;  // loop thread
  LoopGate gate_{[this](std::function<void()> fn) { loop_.Post(std::move(fn)); }};
  std::vector<std::unique_ptr<ServerState>> servers_;
  std::atomic<bool> stopped_{false};
  AsioLoop loop_;  // last: stopped and destroyed first

 private:
  void Keys(Opcode op, size_t server, NamespaceId ns, std::vector<BlockKey> keys, ItemDone done);
  void Route(size_t server, RequestPtr r);
};

Link::Link(ClientImpl& c, ServerState& s, Channel& ch)
    : c_(c), s_(s), ch_(ch), sock_(c.loop_.context()), timer_(c.loop_.context()) {}

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
          slot_bytes_ = w->slot_bytes;
          if (c_.rdma_) return StartRdma(challenge.instance_id);
          Ready(challenge.instance_id);
        });
      });
}

void Link::Ready(uint64_t instance) {
  ready_ = true;
  c_.OnReady(s_, ch_, this, instance);
  if (dead_) return;
  for (uint32_t id : waiting_) {
    if (auto it = pending_.find(id); it != pending_.end()) Enqueue(*it->second);
  }
  waiting_.clear();
  Pump();
  ReadHeader();
}

// RDMA_HELLO with this connection's queue pair; RDMA_READY brings the
// server's, which the queue pair connects to before any request is sent.
void Link::StartRdma(uint64_t instance) {
  auto path = RdmaLinkPath::Create(*c_.rdma_, c_.arena_, c_.gate_.post());
  if (!path.ok()) return Abort(path.status().WithContext(Prefix() + "RDMA queue pair"));
  rdma_ = std::move(path).value();
  hs_out_ = Frame(Opcode::kRdmaHello, 0, EncodeBody(rdma_->Hello()));
  auto self = shared_from_this();
  asio::async_write(sock_, asio::buffer(hs_out_),
                    [this, self, instance](const boost::system::error_code& e, size_t) {
                      if (!Live(e, "send RDMA_HELLO")) return;
                      ReadControl([this, instance](const FrameHeader& h) {
                        if (h.opcode != Opcode::kRdmaReady) return OnControl(h);
                        auto ready = DecodeRdmaReady(body_);
                        if (!ready.ok()) return Bad(std::string(ready.status().message()));
                        Status st = rdma_->Connect(*ready);
                        if (!st.ok()) return Abort(st.WithContext(Prefix() + "RDMA connect"));
                        Ready(instance);
                      });
                    });
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

void Link::Submit(RequestPtr r) {
  if (dead_) return r->FailAll(Status::Unavailable(Prefix() + "connection failed"));
  r->id = next_id_++;
  r->deadline = SteadyClock::now() + std::chrono::milliseconds(c_.o_.op_timeout_ms);
  Request& req = *r;
  pending_.emplace(r->id, std::move(r));
  if (ready_) {
    Enqueue(req);
    Pump();
  } else {
    waiting_.push_back(req.id);
  }
  Tick();
}

void Link::Enqueue(Request& r) {
  auto control = [&](Opcode op, std::vector<std::byte> body) {
    OutFrame f;
    f.header = EncodeFrameHeader({op, 0, r.id, static_cast<uint32_t>(body.size())});
    f.body = std::move(body);
    queue_.push_back(std::move(f));
  };
  if (r.op == Opcode::kPutBegin) {
    PutBegin begin{r.ns, {}};
    for (size_t i = 0; i < r.keys.size(); ++i) begin.items.push_back({r.keys[i], r.srcs[i].size()});
    control(Opcode::kPutBegin, EncodeBody(begin));
    // Over RDMA the blocks go after PUT_GRANT, and PUT_COMMIT after them.
    if (rdma_) return;
    for (size_t i = 0; i < r.keys.size(); ++i) {
      OutFrame f;
      f.header = EncodeFrameHeader({Opcode::kPutData, static_cast<uint16_t>(i), r.id,
                                    static_cast<uint32_t>(kBlockHeaderBytes + r.srcs[i].size())});
      f.a = r.headers[i];
      f.b = r.srcs[i];
      queue_.push_back(std::move(f));
    }
    control(Opcode::kPutCommit, {});
  } else if (r.op == Opcode::kStats) {
    control(Opcode::kStats, {});
  } else if (r.op == Opcode::kGet && rdma_) {
    control(Opcode::kGetLease, EncodeBody(KeyBatch{r.ns, r.keys}));
  } else {
    control(r.op, EncodeBody(KeyBatch{r.ns, r.keys}));
  }
}

void Link::Pump() {
  if (!writing_.empty() || queue_.empty() || dead_) return;
  while (!queue_.empty() && writing_.size() < kMaxFramesPerWrite) {
    writing_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  std::vector<asio::const_buffer> bufs;
  for (const OutFrame& f : writing_) {
    bufs.emplace_back(f.header.data(), f.header.size());
    if (!f.body.empty()) bufs.emplace_back(f.body.data(), f.body.size());
    if (!f.a.empty()) bufs.emplace_back(f.a.data(), f.a.size());
    if (!f.b.empty()) bufs.emplace_back(f.b.data(), f.b.size());
  }
  auto self = shared_from_this();
  asio::async_write(sock_, bufs, TransferAllBulk(),
                    [this, self](const boost::system::error_code& ec, size_t) {
                      writing_.clear();
                      if (Live(ec, "send")) Pump();
                    });
}

void Link::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(in_header_), TransferAllBulk(),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     if (Live(ec, "read")) OnHeader();
                   });
}

Request* Link::Find(uint32_t id, Opcode op, size_t item) {
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second->op != op || item >= it->second->done.size() ||
      it->second->done[item]) {
    return nullptr;
  }
  return it->second.get();
}

void Link::OnHeader() {
  auto h = DecodeFrameHeader(in_header_, slot_bytes_);
  if (!h.ok()) return Bad(std::string(h.status().message()));
  if (h->opcode == Opcode::kGetData) {
    Request* r = Find(h->request_id, Opcode::kGet, h->item);
    if (r == nullptr) return Bad("GET_DATA for no pending item");
    return OnGetData(*r, *h);
  }
  body_.resize(h->body_bytes);
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(body_), TransferAllBulk(),
                   [this, self, hdr = *h](const boost::system::error_code& ec, size_t) {
                     if (!Live(ec, "read")) return;
                     OnControl(hdr);
                     if (!dead_) ReadHeader();
                   });
}

void Link::OnGetData(Request& r, const FrameHeader& h) {
  const size_t item = h.item;
  const uint64_t payload = h.body_bytes - kBlockHeaderBytes;
  auto self = shared_from_this();
  const uint32_t id = r.id;
  if (payload > r.dsts[item].size()) {
    // The caller's buffer is too small: take the bytes off the wire elsewhere.
    body_.resize(h.body_bytes);
    asio::async_read(sock_, asio::buffer(body_), TransferAllBulk(),
                     [this, self, id, item, payload](const boost::system::error_code& ec, size_t) {
                       if (!Live(ec, "read")) return;
                       Request* req = Find(id, Opcode::kGet, item);
                       if (req == nullptr) return Bad("GET request vanished");
                       req->Finish(item,
                                   Status::InvalidArgument("destination of " +
                                                           std::to_string(req->dsts[item].size()) +
                                                           " bytes is smaller than the block's " +
                                                           std::to_string(payload)),
                                   0);
                       Done(*req);
                       if (!dead_) ReadHeader();
                     });
    return;
  }
  std::array<asio::mutable_buffer, 2> bufs = {asio::buffer(r.headers[item]),
                                              asio::buffer(r.dsts[item].data(), payload)};
  asio::async_read(sock_, bufs, TransferAllBulk(),
                   [this, self, id, item, payload](const boost::system::error_code& ec, size_t) {
                     if (!Live(ec, "read block")) return;
                     Request* req = Find(id, Opcode::kGet, item);
                     if (req == nullptr) return Bad("GET request vanished");
                     auto header = DecodeBlockHeader(req->headers[item]);
                     Status st = header.ok() ? VerifyBlock(*header, req->ns, req->keys[item],
                                                           req->dsts[item].first(payload))
                                             : Status::Corruption(header.status().message());
                     req->Finish(item, st.ok() ? st : st.WithContext(Prefix() + "stored block"),
                                 st.ok() ? payload : 0);
                     Done(*req);
                     if (!dead_) ReadHeader();
                   });
}

void Link::OnControl(const FrameHeader& h) {
  if (h.opcode == Opcode::kError) {
    auto e = DecodeError(body_);
    if (!e.ok()) return Bad(std::string(e.status().message()));
    return Abort(Status(e->code, Prefix() + e->text));
  }
  if (!ready_) return Bad("unexpected frame during the handshake");
  if (h.opcode == Opcode::kGetStatus) {
    Request* r = Find(h.request_id, Opcode::kGet, h.item);
    if (r == nullptr || body_.size() != 1) return Bad("GET_STATUS for no pending item");
    const StatusCode code = DecodeCode(static_cast<uint8_t>(body_[0]));
    r->Finish(h.item,
              code == StatusCode::kNotFound ? Status::NotFound("not on " + s_.endpoint)
                                            : Status(code, Prefix() + "GET failed"),
              0);
    return Done(*r);
  }
  auto it = pending_.find(h.request_id);
  if (it == pending_.end()) return Bad("reply for no pending request");
  Request& r = *it->second;
  if (h.opcode == Opcode::kStatsReply && r.op == Opcode::kStats) {
    auto st = DecodeStats(body_);
    if (!st.ok()) return Bad(std::string(st.status().message()));
    r.on_stats(*st);
    r.Finish(0, Status::Ok(), 0);
    return Done(r);
  }
  if (rdma_ && OnRdmaReply(h, r)) return;
  const bool put = r.op == Opcode::kPutBegin;
  const bool keys = r.op == Opcode::kExists || r.op == Opcode::kRemove;
  if (!(h.opcode == Opcode::kBeginReply && put) &&
      !(h.opcode == Opcode::kStatusReply && (put || keys))) {
    return Bad("reply opcode does not match its request");
  }
  auto list = DecodeStatusList(body_);
  if (!list.ok()) return Bad(std::string(list.status().message()));
  if (list->codes.size() != r.done.size()) return Bad("status count does not match the request");
  // Grants matter to RDMA writers only; over TCP the data already follows.
  if (h.opcode == Opcode::kBeginReply) return;
  for (size_t i = 0; i < list->codes.size(); ++i) {
    const StatusCode code = list->codes[i];
    if (code == StatusCode::kOk) {
      r.Finish(i, Status::Ok(), put ? r.srcs[i].size() : 0);
    } else if (code == StatusCode::kNotFound) {
      r.Finish(i, Status::NotFound("not on " + s_.endpoint), 0);
    } else {
      r.Finish(i, Status(code, Prefix() + "refused: " + std::string(StatusCodeName(code))), 0);
    }
  }
  Done(r);
}

void Link::Control(Opcode op, uint32_t id, std::vector<std::byte> body) {
  OutFrame f;
  f.header = EncodeFrameHeader({op, 0, id, static_cast<uint32_t>(body.size())});
  f.body = std::move(body);
  queue_.push_back(std::move(f));
  Pump();
}

// PUT_GRANT and LEASE_REPLY: true when `h` was one of them (handled).
bool Link::OnRdmaReply(const FrameHeader& h, Request& r) {
  auto self = shared_from_this();
  const uint32_t id = r.id;
  if (h.opcode == Opcode::kPutGrant && r.op == Opcode::kPutBegin) {
    auto g = DecodeGrantList(body_);
    if (!g.ok()) return Bad(std::string(g.status().message())), true;
    Status st = rdma_->WriteGranted(*g, r.headers, r.srcs,
                                    [this, self, id](std::vector<Status> items, auto) {
                                      if (!dead_) Granted(id, std::move(items));
                                    });
    if (!st.ok()) Bad(std::string(st.message()));
    return true;
  }
  if (h.opcode == Opcode::kLeaseReply && r.op == Opcode::kGet) {
    auto l = DecodeLeaseReply(body_);
    if (!l.ok()) return Bad(std::string(l.status().message())), true;
    const uint64_t lease = l->lease_id;
    Status st = rdma_->ReadLeased(
        *l, r.dsts, r.headers,
        [this, self, id, lease](std::vector<Status> items, std::vector<uint64_t> bytes) {
          if (!dead_) Leased(id, lease, std::move(items), std::move(bytes));
        });
    if (!st.ok()) Bad(std::string(st.message()));
    return true;
  }
  return false;
}

// Every granted block is in place (or failed): commit the request.
void Link::Granted(uint32_t id, std::vector<Status> items) {
  if (pending_.count(id) == 0) return;
  // A failed completion leaves the queue pair in the error state.
  for (const Status& st : items) {
    if (st.code() == StatusCode::kIOError || st.code() == StatusCode::kCancelled) {
      return Abort(st.WithContext(Prefix() + "RDMA WRITE"));
    }
  }
  Control(Opcode::kPutCommit, id, {});
}

void Link::Leased(uint32_t id, uint64_t lease, std::vector<Status> items,
                  std::vector<uint64_t> bytes) {
  if (lease != 0) Control(Opcode::kLeaseRelease, id, EncodeBody(LeaseRelease{lease}));
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Request& r = *it->second;
  for (size_t i = 0; i < items.size(); ++i) {
    const StatusCode code = items[i].code();
    if (code == StatusCode::kIOError || code == StatusCode::kCancelled) {
      return Abort(items[i].WithContext(Prefix() + "RDMA READ"));
    }
    Status st = items[i];
    if (st.ok()) {
      auto header = DecodeBlockHeader(r.headers[i]);
      st = header.ok() ? VerifyBlock(*header, r.ns, r.keys[i], r.dsts[i].first(bytes[i]))
                       : Status::Corruption(header.status().message());
      if (!st.ok()) st = st.WithContext(Prefix() + "stored block");
    } else if (code == StatusCode::kNotFound) {
      st = Status::NotFound("not on " + s_.endpoint);
    } else {
      st = st.WithContext(Prefix() + "GET failed");
    }
    r.Finish(i, st, st.ok() ? bytes[i] : 0);
  }
  Done(r);
}

void Link::Done(Request& r) {
  if (r.remaining == 0) pending_.erase(r.id);
}

void Link::Tick() {
  if (ticking_ || dead_) return;
  ticking_ = true;
  timer_.expires_after(kTick);
  auto self = shared_from_this();
  timer_.async_wait([this, self](const boost::system::error_code&) {
    ticking_ = false;
    if (dead_) return;
    const auto now = SteadyClock::now();
    if (!ready_ && now >= connect_deadline_) {
      return Abort(Status::Unavailable(Prefix() + "no connection within " +
                                       std::to_string(c_.o_.connect_timeout_ms) + " ms"));
    }
    if (!pending_.empty() && pending_.begin()->second->deadline <= now) {
      return Abort(Status::DeadlineExceeded(Prefix() + "no reply within " +
                                            std::to_string(c_.o_.op_timeout_ms) + " ms"));
    }
    if (!ready_ || !pending_.empty()) Tick();
  });
}

void Link::Abort(const Status& s) {
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
  waiting_.clear();
  auto self = shared_from_this();  // the channel may drop its reference below
  c_.OnDead(s_, ch_, this, was_ready, s);
  for (auto& [id, r] : pending) r->FailAll(s);
}

void ClientImpl::OnReady(ServerState& s, Channel& ch, Link* l, uint64_t instance) {
  ch.backoff_ms = 0;
  if (s.seen && s.instance != instance) {
    log_->Log(LogLevel::kWarning,
              "remote server " + s.endpoint + " restarted; its blocks are gone");
    if (hook_) hook_(s.index);
  }
  s.seen = true;
  s.instance = instance;
}

void ClientImpl::OnDead(ServerState& s, Channel& ch, Link* l, bool was_ready, const Status& why) {
  if (ch.link.get() != l) return;
  ch.link.reset();
  ch.backoff_ms = ch.backoff_ms == 0 ? o_.reconnect_backoff_ms
                                     : std::min(ch.backoff_ms * 2, o_.reconnect_backoff_max_ms);
  ch.next_attempt = SteadyClock::now() + std::chrono::milliseconds(ch.backoff_ms);
  if (was_ready && !stopped_.load(std::memory_order_relaxed)) {
    log_->Log(LogLevel::kWarning,
              "remote server " + s.endpoint + ": connection lost: " + why.ToString());
  }
}

void ClientImpl::Route(size_t server, RequestPtr r) {
  // Runs on the loop thread, so channel state needs no lock.
  loop_.Post([this, server, r] {
    if (stopped_.load(std::memory_order_relaxed)) {
      return r->FailAll(Status::Unavailable("remote tier is shut down"));
    }
    ServerState& s = *servers_[server];
    Channel& ch = s.channels[s.next++ % s.channels.size()];
    if (!ch.link) {
      const auto now = SteadyClock::now();
      if (now < ch.next_attempt) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(ch.next_attempt - now);
        return r->FailAll(Status::Unavailable("remote server " + s.endpoint +
                                              " is unreachable; next attempt in " +
                                              std::to_string(ms.count()) + " ms"));
      }
      ch.link = std::make_shared<Link>(*this, s, ch);
      // Connect may fail at once and drop the channel's reference.
      auto link = ch.link;
      link->Connect();
      return link->Submit(std::move(r));
    }
    ch.link->Submit(r);
  });
}

// A batch is cut into one contiguous chunk per connection of the server, so
// its blocks stream over every connection at once; each chunk goes out as
// soon as its checksums are computed, while the next chunk's are.
void ClientImpl::Put(size_t server, NamespaceId ns, std::vector<PutOp> ops, ItemDone done) {
  const size_t chunks = std::min(ops.size(), servers_[server]->channels.size());
  for (size_t c = 0, begin = 0; c < chunks; ++c) {
    const size_t end = ops.size() * (c + 1) / chunks;
    auto r = std::make_shared<Request>();
    r->op = Opcode::kPutBegin;
    r->ns = ns;
    r->Init(end - begin,
            [done, begin](size_t i, const Status& s, uint64_t b) { done(begin + i, s, b); });
    for (size_t i = begin; i < end; ++i) {
      r->keys.push_back(ops[i].key);
      r->srcs.push_back(ops[i].payload);
      // The header's checksum: the caller's, or computed here on its thread.
      r->headers.emplace_back();
      EncodeBlockHeader(MakeBlockHeader(ns, ops[i].key, ops[i].payload, ops[i].checksum),
                        r->headers.back());
    }
    Route(server, std::move(r));
    begin = end;
  }
}

void ClientImpl::Get(size_t server, NamespaceId ns, std::vector<std::span<std::byte>> dsts,
                     std::vector<BlockKey> keys, ItemDone done) {
  const size_t chunks = std::min(keys.size(), servers_[server]->channels.size());
  for (size_t c = 0, begin = 0; c < chunks; ++c) {
    const size_t end = keys.size() * (c + 1) / chunks;
    auto r = std::make_shared<Request>();
    r->op = Opcode::kGet;
    r->ns = ns;
    r->Init(end - begin,
            [done, begin](size_t i, const Status& s, uint64_t b) { done(begin + i, s, b); });
    r->keys.assign(keys.begin() + begin, keys.begin() + end);
    r->dsts.assign(dsts.begin() + begin, dsts.begin() + end);
    r->headers.resize(r->keys.size());
    Route(server, std::move(r));
    begin = end;
  }
}

void ClientImpl::Keys(Opcode op, size_t server, NamespaceId ns, std::vector<BlockKey> keys,
                      ItemDone done) {
  auto r = std::make_shared<Request>();
  r->op = op;
  r->ns = ns;
  r->Init(keys.size(), std::move(done));
  r->keys = std::move(keys);
  Route(server, std::move(r));
}

Result<Stats> ClientImpl::GetStats(size_t server) {
  auto r = std::make_shared<Request>();
  auto result = std::make_shared<std::promise<Result<Stats>>>();
  auto stats = std::make_shared<Stats>();
  r->op = Opcode::kStats;
  r->on_stats = [stats](const Stats& s) { *stats = s; };
  r->Init(1, [result, stats](size_t, const Status& s, uint64_t) {
    result->set_value(s.ok() ? Result<Stats>(*stats) : Result<Stats>(s));
  });
  auto fut = result->get_future();
  Route(server, std::move(r));
  return fut.get();
}

uint64_t ClientImpl::RegisterHostMemory(std::span<std::byte> memory) {
  if (!rdma_ || memory.empty()) return 0;
  auto mr = rdma_->Register(memory);
  if (!mr.ok()) {
    log_->Log(LogLevel::kWarning,
              "remote tier: host arena not registered for RDMA (blocks are "
              "staged instead): " +
                  mr.status().ToString());
    return 0;
  }
  std::shared_ptr<RdmaMemory> arena = std::move(mr).value();
  std::promise<void> set;
  loop_.Post([this, arena, &set] {
    arena_ = arena;
    set.set_value();
  });
  set.get_future().wait();
  return memory.size();
}

void ClientImpl::Shutdown() {
  if (stopped_.exchange(true)) return;
  std::promise<void> closed;
  loop_.Post([this, &closed] {
    for (auto& s : servers_) {
      for (Channel& ch : s->channels) {
        if (auto l = ch.link) l->Abort(Status::Unavailable("remote tier is shut down"));
      }
    }
    closed.set_value();
  });
  closed.get_future().wait();
  loop_.Stop();
  gate_.Close();
}

Result<std::unique_ptr<RemoteClient>> RemoteClient::Create(const RemoteClientOptions& options,
                                                           std::shared_ptr<LogSink> log,
                                                           RestartHook on_restart) {
  if (options.servers.empty()) return Status::InvalidArgument("no memd servers given");
  if (options.secret.empty()) return Status::InvalidArgument("no shared secret given");
  std::vector<std::unique_ptr<ServerState>> servers;
  for (size_t i = 0; i < options.servers.size(); ++i) {
    KVTIER_ASSIGN_OR_RETURN(tcp::endpoint ep, ParseTcpEndpoint(options.servers[i], false));
    auto s = std::make_unique<ServerState>();
    s->index = i;
    s->endpoint = options.servers[i];
    s->ep = ep;
    s->channels.resize(std::max<uint32_t>(1, options.connections));
    servers.push_back(std::move(s));
  }
  if (options.transport != "tcp" && options.transport != "rdma") {
    return Status::InvalidArgument("transport '" + options.transport +
                                   "' is unknown; expected tcp or rdma");
  }
  std::unique_ptr<RdmaDevice> device;
  if (options.transport == "rdma") {
    auto d = options.rdma_device ? options.rdma_device() : OpenRdmaDevice();
    if (!d.ok()) return d.status();
    device = std::move(d).value();
  }
  auto c =
      std::make_unique<ClientImpl>(options, log ? log : StderrLogSink(), std::move(on_restart));
  c->rdma_ = std::move(device);
  c->servers_ = std::move(servers);
  return std::unique_ptr<RemoteClient>(std::move(c));
}

}  // namespace kvtier::internal::memd
