// The remote client's RDMA steps (transport: rdma): connecting the queue
// pair after the handshake, and acting on PUT_GRANT and LEASE_REPLY with
// one-sided WRITEs and READs (rdma_link.h).
#include <boost/asio/write.hpp>

#include "tiers/remote/remote_client_impl.h"

namespace kvtier::internal::memd {

// RDMA_HELLO with this connection's queue pair; RDMA_READY brings the
// server's, which the queue pair connects to before any request is sent.
void Link::StartRdma(uint64_t instance) {
  auto path = RdmaLinkPath::Create(*c_.rdma_, c_.arena_, c_.gate_.post(), c_.o_.clock);
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

// PUT_GRANT and LEASE_REPLY: true when `h` was one of them (handled).
//
// The callbacks hold the link weakly: they run on the loop thread only while
// the link's RdmaLinkPath (so the link) is alive, but they are destroyed
// with their batch wherever its last completion drops it, which may be the
// device's poller thread after the client is gone; the last reference to a
// link must not go there.
//
// Each request takes one of them, and only once its request frame is
// written: a second one would start a second batch into the same buffers,
// which could complete after the request has finished.
bool Link::OnRdmaReply(const FrameHeader& h, Request& r) {
  std::weak_ptr<Link> weak = weak_from_this();
  const uint32_t id = r.id;
  const bool grant = h.opcode == Opcode::kPutGrant && r.op == Opcode::kPutBegin;
  const bool lease = h.opcode == Opcode::kLeaseReply && r.op == Opcode::kGet;
  if ((grant || lease) && !r.Awaits(Await::kRdmaReply)) {
    Bad(std::string(grant ? "PUT_GRANT" : "LEASE_REPLY") +
        " for a request that is not waiting for one");
    return true;
  }
  if (grant) {
    r.await = Await::kNothing;
    auto g = DecodeGrantList(body_);
    if (!g.ok()) return Bad(std::string(g.status().message())), true;
    std::vector<bool> granted;
    for (const RemoteSlot& slot : g->items) granted.push_back(slot.code == StatusCode::kOk);
    Status st = rdma_->WriteGranted(
        *g, r.headers, r.srcs,
        [this, weak, id, granted = std::move(granted)](std::vector<Status> items, auto) {
          auto self = weak.lock();
          if (self && !dead_) Granted(id, granted, std::move(items));
        });
    if (!st.ok()) Bad(std::string(st.message()));
    return true;
  }
  if (lease) {
    r.await = Await::kNothing;
    auto l = DecodeLeaseReply(body_);
    if (!l.ok()) return Bad(std::string(l.status().message())), true;
    const uint64_t lease_id = l->lease_id;
    auto outputs = std::make_shared<const bool>(true);
    r.outputs = outputs;
    Status st = rdma_->ReadLeased(
        *l, r.dsts, r.headers, outputs,
        [this, weak, id, lease_id](std::vector<Status> items, std::vector<uint64_t> bytes) {
          auto self = weak.lock();
          if (self && !dead_) Leased(id, lease_id, std::move(items), std::move(bytes));
        });
    if (!st.ok()) Bad(std::string(st.message()));
    return true;
  }
  return false;
}

// Every granted block is in place (or failed): commit the request.
void Link::Granted(uint32_t id, const std::vector<bool>& granted, std::vector<Status> items) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  // A failed completion leaves the queue pair in the error state.
  for (const Status& st : items) {
    if (st.code() == StatusCode::kIOError || st.code() == StatusCode::kCancelled) {
      return Abort(st.WithContext(Prefix() + "RDMA WRITE"));
    }
  }
  Request& r = *it->second;
  // A granted block whose bytes did not go for a local reason (no staging
  // memory) fails with that reason now; its slot still goes back with the
  // commit, whose answer for it is then ignored. The request stays pending
  // until that answer: the server holds its reservations until then.
  for (size_t i = 0; i < items.size() && i < granted.size(); ++i) {
    if (granted[i] && !items[i].ok()) r.Finish(i, items[i].WithContext(Prefix() + "PUT"), 0);
  }
  r.await = Await::kFinalReply;
  Control(Opcode::kPutCommit, &r, id, {});
}

void Link::Leased(uint32_t id, uint64_t lease, std::vector<Status> items,
                  std::vector<uint64_t> bytes) {
  if (lease != 0) Control(Opcode::kLeaseRelease, nullptr, id, EncodeBody(LeaseRelease{lease}));
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

}  // namespace kvtier::internal::memd
