// RemoteClient (remote_client.h): its servers and their channels, picking a
// channel and backing off a lost one, cutting batches into requests, and
// creating and shutting down the client.
#include "tiers/remote/remote_client.h"

#include <future>

#include "tiers/remote/remote_client_impl.h"

namespace kvtier::internal::memd {

void ClientImpl::OnReady(ServerState& s, Channel& ch, Link* l, uint64_t instance) {
  ch.backoff_ms = 0;
  s.last_failure.clear();
  s.silent = false;
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
  // Doubled in 64 bits: a backoff above 2^31 ms would wrap in 32.
  ch.backoff_ms = ch.backoff_ms == 0
                      ? o_.reconnect_backoff_ms
                      : static_cast<uint32_t>(std::min<uint64_t>(uint64_t{ch.backoff_ms} * 2,
                                                                 o_.reconnect_backoff_max_ms));
  ch.next_attempt = SteadyClock::now() + std::chrono::milliseconds(ch.backoff_ms);
  if (stopped_.load(std::memory_order_relaxed)) return;
  if (was_ready) {
    log_->Log(LogLevel::kWarning,
              "remote server " + s.endpoint + ": connection lost: " + why.ToString());
    return;
  }
  // A server down is one line, not one per attempt; a server back with
  // another secret (or refusing for another reason) is a line of its own.
  if (std::string reason = why.ToString(); reason != s.last_failure) {
    log_->Log(LogLevel::kWarning,
              "remote server " + s.endpoint + ": cannot connect (retrying): " + reason);
    s.last_failure = std::move(reason);
  }
}

void ClientImpl::TEST_StartRequestIdsAt(uint32_t id) {
  const Status set = loop_.Call([this, id] { first_request_id_ = id; });
  if (!set.ok()) log_->Log(LogLevel::kWarning, "remote tier: " + set.ToString());
}

std::shared_ptr<Link> ClientImpl::Open(ServerState& s, Channel& ch) {
  ch.link = std::make_shared<Link>(*this, s, ch);
  // Connect may fail at once and drop the channel's reference.
  auto link = ch.link;
  link->Connect();
  return link;
}

// Runs on the loop thread, so channel state needs no lock. Channels take
// requests in turn, but a request goes to a ready connection when its turn's
// channel has none (lost and backing off, or still connecting): a server
// that takes fewer connections than configured, or one lost connection,
// fails nothing while another connection to the server works. Only when no
// channel can be used at all do the request's items fail.
void ClientImpl::RouteOnLoop(size_t server, const RequestPtr& r) {
  if (stopped_.load(std::memory_order_relaxed)) {
    return r->FailAll(Status::Unavailable("remote tier is shut down"));
  }
  ServerState& s = *servers_[server];
  const size_t n = s.channels.size();
  const size_t first = s.next++ % n;
  const auto now = SteadyClock::now();
  // The turn's channel reconnects once its backoff has passed, even when
  // this request goes elsewhere.
  if (Channel& ch = s.channels[first]; !ch.link && now >= ch.next_attempt) Open(s, ch);
  std::shared_ptr<Link> connecting;
  for (size_t k = 0; k < n; ++k) {
    const std::shared_ptr<Link>& link = s.channels[(first + k) % n].link;
    if (!link) continue;
    if (link->ready()) return link->Submit(r);
    if (!connecting) connecting = link;
  }
  if (connecting && !s.silent) return connecting->Submit(r);
  auto soonest = SteadyClock::time_point::max();
  for (size_t k = 0; k < n; ++k) {
    Channel& ch = s.channels[(first + k) % n];
    if (!ch.link && now >= ch.next_attempt) {
      if (!s.silent) return Open(s, ch)->Submit(r);
      Open(s, ch);  // reconnects meanwhile; the request does not wait for it
    }
    soonest = std::min(soonest, ch.next_attempt);
  }
  if (s.silent) {
    return r->FailAll(Status::Unavailable("remote server " + s.endpoint +
                                          " answered nothing within its timeout; reconnecting"));
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(soonest - now);
  r->FailAll(Status::Unavailable("remote server " + s.endpoint +
                                 " is unreachable; next attempt in " + std::to_string(ms.count()) +
                                 " ms"));
}

void ClientImpl::Route(size_t server, RequestPtr r) {
  // A closure that throws (allocation failure) fails its items rather than
  // leaving them to the request's deadline.
  const bool posted = loop_.Post([this, server, r] {
    try {
      RouteOnLoop(server, r);
    } catch (const std::exception& e) {
      r->FailAll(
          Status::Internal(std::string("remote tier: routing a request threw: ") + e.what()));
    }
  });
  if (!posted) r->FailAll(Status::Unavailable("remote tier is shut down"));
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
  const Status set = loop_.Call([this, arena] {
    arena_ = arena;
    // Links connected already (the tier reaches every server at open, before
    // the runtime registers its arena) take it too; links made later take it
    // from arena_.
    for (auto& s : servers_) {
      for (Channel& ch : s->channels) {
        if (ch.link) ch.link->UseArena(arena);
      }
    }
  });
  if (!set.ok()) {  // shut down (nothing will use it), or the hand-over failed
    if (set.code() != StatusCode::kUnavailable) {
      log_->Log(LogLevel::kWarning,
                "remote tier: host arena not handed to links: " + set.ToString());
    }
    return 0;
  }
  return memory.size();
}

void ClientImpl::Shutdown() {
  if (stopped_.exchange(true)) return;
  const Status closed = loop_.Call([this] {
    for (auto& s : servers_) {
      for (Channel& ch : s->channels) {
        if (auto l = ch.link) l->Abort(Status::Unavailable("remote tier is shut down"));
      }
    }
  });
  if (!closed.ok()) log_->Log(LogLevel::kWarning, "remote tier shutdown: " + closed.ToString());
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
    const std::string& entry = options.servers[i];
    Result<tcp::endpoint> ep = FirstAddress(options, entry);
    if (!ep.ok()) return ep.status();
    auto s = std::make_unique<ServerState>();
    s->index = i;
    s->endpoint = entry;
    s->ep = *ep;
    s->named = IsNamedHost(entry);
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
