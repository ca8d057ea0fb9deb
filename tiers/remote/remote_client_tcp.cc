// The remote client's requests on the socket: framing them, writing them
// out in batches, and matching each reply to its pending request.
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "tiers/remote/remote_client_impl.h"

namespace kvtier::internal::memd {
namespace {

constexpr size_t kMaxFramesPerWrite = 64;

}  // namespace

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

void Link::Done(Request& r) {
  if (r.remaining == 0) pending_.erase(r.id);
}

}  // namespace kvtier::internal::memd
