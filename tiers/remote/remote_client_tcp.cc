// The remote client's requests on the socket: framing them, writing them
// out in batches, and matching each reply to its pending request.
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <new>

#include "tiers/remote/remote_client_impl.h"

namespace kvtier::internal::memd {
namespace {

constexpr size_t kMaxFramesPerWrite = 64;

// A read's completion condition that records each part of it as progress.
auto ReadProgress(SteadyClock::time_point& last) {
  return [&last](const boost::system::error_code& ec, size_t) -> size_t {
    if (ec) return 0;
    last = SteadyClock::now();
    return size_t{1} << 30;
  };
}

}  // namespace

void Link::Submit(RequestPtr r) {
  if (dead_) return r->FailAll(Status::Unavailable(Prefix() + "connection failed"));
  // Ids wrap; 0 is left to the handshake, and an id still pending (a
  // request 2^32 ids old) is not reused.
  while (next_id_ == 0 || pending_.count(next_id_) != 0) ++next_id_;
  r->id = next_id_++;
  for (const auto& s : r->srcs) r->bytes += s.size();
  for (const auto& d : r->dsts) r->bytes += d.size();
  owed_bytes_ += r->bytes;
  r->deadline = SteadyClock::now() + std::chrono::milliseconds(c_.o_.op_timeout_ms);
  r->cap = r->deadline + std::chrono::milliseconds(owed_bytes_ * 1000 / kFloorBytesPerSecond);
  Request& req = *r;
  const RequestPtr keep = r;
  try {
    deadlines_.emplace(r->deadline, r->id);
    pending_.emplace(r->id, std::move(r));
    if (ready_) {
      Start(req);
      Pump();
    } else {
      waiting_.push_back(req.id);
    }
    Tick();
  } catch (const std::bad_alloc&) {
    // Out of memory with the request taken, some of its frames maybe queued
    // (pointing into its caller's buffers) or a write half set up: the
    // connection goes, its socket closed before any request fails, so no
    // byte is sent from a buffer its caller has freed.
    Abort(Status::Internal(Prefix() + "out of memory queueing a request"));
    keep->FailAll(Status::Internal(Prefix() + "out of memory queueing a request"));
  }
}

// Queues `f` for the socket; `owner` (may be null) counts it until written.
void Link::Push(OutFrame f, Request* owner) {
  if (owner != nullptr) {
    if (auto it = pending_.find(owner->id); it != pending_.end()) f.owner = it->second;
    if (f.owner) ++owner->unsent;
  }
  queue_.push_back(std::move(f));
}

// The server refuses a PUT_DATA frame larger than its slot as a protocol
// error and closes the connection, failing every request on it; its slot
// size may have changed since the tier opened (a restart with another
// --slot-size). Such an item is the caller's alone to fail.
bool Link::FitSlots(Request& r) {
  std::vector<size_t> keep;
  for (size_t i = 0; i < r.keys.size(); ++i) {
    const uint64_t wire = kBlockHeaderBytes + r.srcs[i].size();
    if (wire <= slot_bytes_) {
      keep.push_back(i);
      continue;
    }
    Status refused = Status::InvalidArgument(
        Prefix() + "block of " + std::to_string(r.srcs[i].size()) + " bytes (" +
        std::to_string(wire) + " with its header) exceeds the server's slot of " +
        std::to_string(slot_bytes_) + " bytes");
    // The tier checked every server's slots at open: this one restarted
    // with smaller ones, and every write of such a block to it fails.
    if (s_.slot_refusal_logged != slot_bytes_) {
      c_.log_->Log(LogLevel::kWarning, std::string(refused.message()) +
                                           "; restart it with --slot-size of at least " +
                                           std::to_string(wire) + " bytes");
      s_.slot_refusal_logged = slot_bytes_;
    }
    r.Finish(i, std::move(refused), 0);
  }
  if (keep.size() == r.keys.size()) return true;
  if (keep.empty()) {
    Done(r);  // may destroy r
    return false;
  }
  std::vector<BlockKey> keys;
  std::vector<std::span<const std::byte>> srcs;
  std::vector<std::array<std::byte, kBlockHeaderBytes>> headers;
  for (size_t i : keep) {
    keys.push_back(r.keys[i]);
    srcs.push_back(r.srcs[i]);
    headers.push_back(r.headers[i]);
  }
  r.keys = std::move(keys);
  r.srcs = std::move(srcs);
  r.headers = std::move(headers);
  r.done.assign(keep.size(), 0);
  r.remaining = keep.size();
  r.cb = [cb = std::move(r.cb), keep = std::move(keep)](size_t i, const Status& s, uint64_t b) {
    cb(keep[i], s, b);
  };
  return true;
}

void Link::Start(Request& r) {
  if (r.op == Opcode::kPutBegin && !FitSlots(r)) return;
  if (rdma_ && r.op == Opcode::kPutBegin) {
    // A request alone is never held: one larger than the budget is the
    // server's to refuse.
    const size_t n = r.keys.size();
    if (!held_puts_.empty() || (begun_items_ != 0 && begun_items_ + n > kMaxBegunPutItems)) {
      held_puts_.push_back(r.id);
      return;
    }
    begun_items_ += n;
    r.begun = n;
  }
  Enqueue(r);
}

void Link::StartHeld() {
  while (!held_puts_.empty()) {
    auto it = pending_.find(held_puts_.front());
    if (it != pending_.end()) {
      Request& r = *it->second;
      const size_t n = r.keys.size();
      if (begun_items_ != 0 && begun_items_ + n > kMaxBegunPutItems) break;
      begun_items_ += n;
      r.begun = n;
      Enqueue(r);
    }
    held_puts_.pop_front();
  }
  Pump();
}

void Link::Enqueue(Request& r) {
  auto control = [&](Opcode op, std::vector<std::byte> body) {
    OutFrame f;
    f.header = EncodeFrameHeader({op, 0, r.id, static_cast<uint32_t>(body.size())});
    f.body = std::move(body);
    Push(std::move(f), &r);
  };
  r.await = Await::kFinalReply;
  if (r.op == Opcode::kPutBegin) {
    PutBegin begin{r.ns, {}};
    for (size_t i = 0; i < r.keys.size(); ++i) begin.items.push_back({r.keys[i], r.srcs[i].size()});
    control(Opcode::kPutBegin, EncodeBody(begin));
    // Over RDMA the blocks go after PUT_GRANT, and PUT_COMMIT after them.
    if (rdma_) {
      r.await = Await::kRdmaReply;
      return;
    }
    for (size_t i = 0; i < r.keys.size(); ++i) {
      OutFrame f;
      f.header = EncodeFrameHeader({Opcode::kPutData, static_cast<uint16_t>(i), r.id,
                                    static_cast<uint32_t>(kBlockHeaderBytes + r.srcs[i].size())});
      f.a = r.headers[i];
      f.b = r.srcs[i];
      Push(std::move(f), &r);
    }
    control(Opcode::kPutCommit, {});
  } else if (r.op == Opcode::kStats) {
    control(Opcode::kStats, {});
  } else if (r.op == Opcode::kGet && rdma_) {
    control(Opcode::kGetLease, EncodeBody(KeyBatch{r.ns, r.keys}));
    r.await = Await::kRdmaReply;
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
  writing_ends_.clear();
  writing_sent_ = 0;
  size_t end = 0;
  for (const OutFrame& f : writing_) {
    bufs.emplace_back(f.header.data(), f.header.size());
    if (!f.body.empty()) bufs.emplace_back(f.body.data(), f.body.size());
    if (!f.a.empty()) bufs.emplace_back(f.a.data(), f.a.size());
    if (!f.b.empty()) bufs.emplace_back(f.b.data(), f.b.size());
    end += f.header.size() + f.body.size() + f.a.size() + f.b.size();
    writing_ends_.push_back(end);
  }
  auto self = shared_from_this();
  // The condition runs after every partial write, so a frame counts as sent
  // as soon as its last byte is with the kernel, before any reply to it can
  // have been read: a reply may come while later frames of the batch are
  // still going out.
  auto sent = [this](const boost::system::error_code& ec, size_t bytes) -> size_t {
    if (ec) return 0;
    last_progress_ = SteadyClock::now();
    Sent(bytes);
    return size_t{1} << 30;
  };
  asio::async_write(sock_, bufs, sent,
                    [this, self](const boost::system::error_code& ec, size_t bytes) {
                      if (!ec && !dead_) Sent(bytes);
                      writing_.clear();
                      if (Live(ec, "send")) Pump();
                    });
}

// The first `bytes` of writing_ are out: the requests of the frames they
// complete may take replies now.
void Link::Sent(size_t bytes) {
  for (; writing_sent_ < writing_.size() && writing_ends_[writing_sent_] <= bytes;
       ++writing_sent_) {
    if (const RequestPtr& owner = writing_[writing_sent_].owner) --owner->unsent;
  }
}

void Link::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(in_header_), ReadProgress(last_progress_),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     if (Live(ec, "read")) OnHeader();
                   });
}

Request* Link::Find(uint32_t id, Opcode op, size_t item) {
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second->op != op || item >= it->second->done.size() ||
      it->second->done[item] || !it->second->Awaits(Await::kFinalReply)) {
    return nullptr;
  }
  return it->second.get();
}

void Link::OnHeader() {
  auto h = DecodeFrameHeader(in_header_, slot_bytes_);
  if (!h.ok()) return Bad(std::string(h.status().message()));
  if (h->opcode == Opcode::kGetData) {
    // Over RDMA blocks come by READ only: bytes here could race a READ into
    // the same buffers.
    if (rdma_) return Bad("GET_DATA on an RDMA connection");
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
  asio::async_read(sock_, bufs, ReadProgress(last_progress_),
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
    // An OK status would finish every pending item as done: PUTs as landed,
    // EXISTS as present.
    if (e->code == StatusCode::kOk) return Bad("ERROR frame with status code ok: " + e->text);
    return Abort(Status(e->code, Prefix() + e->text));
  }
  if (!ready_) return Bad("unexpected frame during the handshake");
  if (h.opcode == Opcode::kGetStatus) {
    // Over RDMA a GET is answered by LEASE_REPLY alone.
    if (rdma_) return Bad("GET_STATUS on an RDMA connection");
    Request* r = Find(h.request_id, Opcode::kGet, h.item);
    if (r == nullptr || body_.size() != 1) return Bad("GET_STATUS for no pending item");
    const StatusCode code = DecodeCode(static_cast<uint8_t>(body_[0]));
    // A found block comes as GET_DATA; an OK here would be a hit of 0 bytes.
    if (code == StatusCode::kOk) return Bad("GET_STATUS with status code ok");
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
    if (!r.Awaits(Await::kFinalReply)) return Bad("STATS_REPLY before STATS was sent");
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
  // Until its last frame is written the server cannot have read it, and the
  // request's buffers are still being sent.
  if (!r.Awaits(Await::kFinalReply)) {
    return Bad(std::string("STATUS_REPLY before ") + (put ? "PUT_COMMIT" : "the request") +
               " was sent");
  }
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

void Link::Control(Opcode op, Request* owner, uint32_t id, std::vector<std::byte> body) {
  OutFrame f;
  f.header = EncodeFrameHeader({op, 0, id, static_cast<uint32_t>(body.size())});
  f.body = std::move(body);
  Push(std::move(f), owner);
  Pump();
}

void Link::Done(Request& r) {
  if (r.remaining != 0) return;
  // A PUT is done at its STATUS_REPLY: the server has dropped its
  // reservations.
  const size_t begun = r.begun;
  owed_bytes_ -= r.bytes;
  deadlines_.erase({r.deadline, r.id});
  pending_.erase(r.id);  // may destroy r
  if (begun == 0) return;
  begun_items_ -= begun;
  StartHeld();
}

}  // namespace kvtier::internal::memd
