// One memd connection (Session): reading frames off the socket, writing
// replies in batches, refusing a peer that breaks the protocol, and closing.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "tiers/remote/memd_server_impl.h"

namespace kvtier::internal::memd {
namespace {

constexpr size_t kDiscardChunk = 64 * 1024;
constexpr size_t kMaxFramesPerWrite = 64;

// What a client may send; every other opcode is a reply and is refused from
// its header, whatever the session's state (a GET_DATA header would otherwise
// announce a block-sized body).
bool IsRequest(Opcode op) {
  switch (op) {
    case Opcode::kHello:
    case Opcode::kAuth:
    case Opcode::kPutBegin:
    case Opcode::kPutData:
    case Opcode::kPutCommit:
    case Opcode::kGet:
    case Opcode::kExists:
    case Opcode::kRemove:
    case Opcode::kStats:
    case Opcode::kRdmaHello:
    case Opcode::kGetLease:
    case Opcode::kLeaseRelease:
      return true;
    default:
      return false;
  }
}

uint64_t OutBytes(const auto& out) { return out.header.size() + out.body.size() + out.data.size(); }
uint64_t HeapBytes(const auto& out) { return out.header.size() + out.body.size(); }

constexpr int kKeepIdleS = 30;
constexpr int kKeepIntervalS = 10;
constexpr int kKeepProbes = 3;
// Not below keepalive's own 60 s: the user timeout also ends a connection
// whose keepalive probes go unanswered, and would otherwise cut it short.
constexpr unsigned kTcpUserTimeoutMs = 60000;

}  // namespace

void KeepPeerAlive(tcp::socket& sock) {
  boost::system::error_code ec;
  sock.set_option(asio::socket_base::keep_alive(true), ec);
  const int fd = sock.native_handle();
  for (auto [option, value] :
       {std::pair{TCP_KEEPIDLE, kKeepIdleS}, std::pair{TCP_KEEPINTVL, kKeepIntervalS},
        std::pair{TCP_KEEPCNT, kKeepProbes}}) {
    setsockopt(fd, IPPROTO_TCP, option, &value, sizeof value);
  }
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kTcpUserTimeoutMs, sizeof kTcpUserTimeoutMs);
}

void Session::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(in_header_), TransferAllBulk(),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     if (Alive(ec, "read")) OnHeader();
                   });
}

void Session::ReadNext() {
  if (closing_ || closed_) return;
  if (Backlogged()) {
    read_paused_ = true;
    reservations_.PauseProgress(srv_.options_.reply_timeout_ms);
    return;
  }
  ReadHeader();
}

bool Session::Backlogged() const {
  return queued_replies() >= kMaxQueuedReplies || out_bytes_ >= kMaxQueuedReplyBytes ||
         out_heap_bytes_ >= kMaxQueuedHeapBytes;
}

bool Session::Alive(const boost::system::error_code& ec, const char* what) {
  // After an ERROR nothing more is read: the write of the ERROR closes.
  if (closed_ || closing_) return false;
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
  // A PUT_DATA is checked against its PUT_BEGIN item (ReadPutData), not the
  // slot size: one for an item refused there as too large for a slot is read
  // and dropped, so a client that misjudged the slot size loses that item,
  // not its connection. Only a reserved slot, which the item fits, is read
  // into.
  auto h = DecodeFrameHeader(in_header_, kMaxBlockPayloadBytes + kBlockHeaderBytes);
  if (!h.ok())
    return ProtocolError(StatusCode::kInvalidArgument, std::string(h.status().message()));
  frame_ = *h;
  if (!IsRequest(frame_.opcode)) {
    return ProtocolError(
        StatusCode::kInvalidArgument,
        "opcode " + std::to_string(static_cast<int>(frame_.opcode)) + " is not a request");
  }
  // Before WELCOME only the next handshake frame is read, and only a small
  // body: nothing larger is allocated for an unauthenticated peer.
  if (phase_ != Phase::kReady) {
    const Opcode next = phase_ == Phase::kHello ? Opcode::kHello : Opcode::kAuth;
    if (frame_.opcode != next) {
      return ProtocolError(StatusCode::kInvalidArgument, "handshake expected (HELLO, then AUTH)");
    }
    if (frame_.body_bytes > kMaxHandshakeBodyBytes) {
      return ProtocolError(StatusCode::kInvalidArgument,
                           "handshake frame body of " + std::to_string(frame_.body_bytes) +
                               " bytes exceeds the limit of " +
                               std::to_string(kMaxHandshakeBodyBytes));
    }
  }
  if (frame_.opcode == Opcode::kPutData) return ReadPutData();
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
  reading_block_ = true;
  asio::async_read(sock_, asio::buffer(dst.data(), dst.size()), TransferAllBulk(),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     reading_block_ = false;
                     if (Alive(ec, "read block")) ReadNext();
                   });
}

// The data of an item whose reservation failed still arrives (the client
// streams without waiting for grants); read and drop it.
void Session::Discard(size_t left) {
  if (left == 0) return ReadNext();
  scratch_.resize(kDiscardChunk);
  const size_t n = std::min(left, scratch_.size());
  auto self = shared_from_this();
  asio::async_read(sock_, asio::buffer(scratch_.data(), n), TransferAllBulk(),
                   [this, self, left, n](const boost::system::error_code& ec, size_t) {
                     if (Alive(ec, "discard")) Discard(left - n);
                   });
}

void Session::Send(Opcode op, std::vector<std::byte> body, uint16_t item) {
  Out out;
  out.header = EncodeFrameHeader({op, item, frame_.request_id, static_cast<uint32_t>(body.size())});
  out.body = std::move(body);
  Enqueue(std::move(out));
  Pump();
}

void Session::Unpin(int64_t slot) {
  srv_.pool_->Unpin(static_cast<uint32_t>(slot));
  auto it = pinned_slots_.find(static_cast<uint32_t>(slot));
  if (it != pinned_slots_.end() && --it->second == 0) pinned_slots_.erase(it);
}

void Session::Enqueue(Out out) {
  const uint64_t bytes = OutBytes(out), heap = HeapBytes(out);
  queue_.push_back(std::move(out));  // may throw: then nothing is counted
  out_bytes_ += bytes;
  out_heap_bytes_ += heap;
}

// Drops the queued frames (not those being written) and their pins.
void Session::DropQueued() {
  for (const Out& o : queue_) {
    if (o.pin >= 0) Unpin(o.pin);
    out_bytes_ -= OutBytes(o);
    out_heap_bytes_ -= HeapBytes(o);
  }
  queue_.clear();
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
  write_progress_ms_ = NowMs();
  // Asked after every partial write: each one that took bytes is progress.
  auto progress = [this, seen = size_t{0}](const boost::system::error_code& ec,
                                           size_t written) mutable {
    if (written != seen) {
      seen = written;
      write_progress_ms_ = NowMs();
    }
    return TransferAllBulk()(ec, written);
  };
  asio::async_write(sock_, bufs, progress,
                    [this, self](const boost::system::error_code& ec, size_t) {
                      for (const Out& o : writing_) {
                        if (o.pin >= 0) Unpin(o.pin);
                        out_bytes_ -= OutBytes(o);
                        out_heap_bytes_ -= HeapBytes(o);
                      }
                      writing_.clear();
                      if (closed_) return;
                      if (ec || (closing_ && queue_.empty())) return Close();
                      if (read_paused_ && !closing_ && !Backlogged()) {
                        read_paused_ = false;
                        reservations_.ResumeProgress();
                        ReadHeader();
                      }
                      Pump();
                    });
}

void Session::ProtocolError(StatusCode code, const std::string& why) {
  if (uint64_t held = 0; srv_.protocol_warnings_.Pass(NowMs(), &held)) {
    srv_.log_->Log(LogLevel::kWarning, "memd: " + peer_ + ": " + why + "; closing the connection" +
                                           WarningGate::Held(held));
  }
  // RDMA grants wait for Close(): the peer may still be writing into them
  // until the queue pair is destroyed.
  reservations_.Cancel(PutPath::kTcp);
  // Nothing queued after the error is sent: drop queued GET frames (and
  // their pins) so the error is the last thing the peer reads.
  DropQueued();
  closing_ = true;
  closing_since_ms_ = NowMs();
  Send(Opcode::kError, EncodeBody(ErrorReply{code, why}));
}

void Session::CheckDeadlines(uint64_t now_ms) {
  if (closed_) return;
  if (closing_) {
    // A peer that does not read its ERROR holds nothing for long.
    if (now_ms - closing_since_ms_ >= kCloseGraceMs) Close();
    return;
  }
  const MemdServerOptions& o = srv_.options_;
  // A peer that takes none of its replies cannot be told why: close at once,
  // which ends the write and unpins the slots its GET replies hold.
  if (!writing_.empty() && now_ms >= write_progress_ms_ + o.reply_timeout_ms) {
    srv_.log_->Log(LogLevel::kWarning, "memd: " + peer_ + ": took no reply bytes for " +
                                           std::to_string(o.reply_timeout_ms) +
                                           " ms; closing the connection");
    return Close();
  }
  if (phase_ != Phase::kReady && now_ms - accepted_ms_ >= o.handshake_timeout_ms) {
    // Turned away at the limit: that is the reason it is told.
    if (turned_away()) return ProtocolError(StatusCode::kResourceExhausted, turned_away_);
    return Expire("handshake not completed within " + std::to_string(o.handshake_timeout_ms) +
                  " ms");
  }
  // While the server has stopped reading (replies backlogged), a put's
  // data may wait unread in the socket: no stall of the peer's, so that
  // time counts as the put's progress, up to reply_timeout_ms over its
  // life (MemdReservations::PauseProgress).
  std::optional<uint64_t> put = reservations_.OldestProgressMs();
  if (put && now_ms >= *put + o.put_timeout_ms) {
    Expire("a put made no progress for " + std::to_string(o.put_timeout_ms) +
           " ms; its reservations are cancelled");
  }
}

// Called between reads: a read may be pending. One into a reserved slot must
// not outlive the reservation, so that session is closed at once (the
// socket is closed before the slot returns to the pool); otherwise the peer
// is told why first.
void Session::Expire(const std::string& why) {
  if (reading_block_) {
    if (uint64_t held = 0; srv_.protocol_warnings_.Pass(NowMs(), &held)) {
      srv_.log_->Log(LogLevel::kWarning, "memd: " + peer_ + ": " + why +
                                             "; closing the connection" + WarningGate::Held(held));
    }
    return Close();
  }
  ProtocolError(StatusCode::kDeadlineExceeded, why);
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  // Destroys the queue pair, then returns its grants and leases.
  rdma_.reset();
  boost::system::error_code ec;
  // The socket goes first: a pending read into a reserved slot is cancelled
  // (on this thread) before the slot can be reserved again.
  sock_.shutdown(tcp::socket::shutdown_both, ec);
  sock_.close(ec);
  reservations_.Cancel();
  DropQueued();
  // Frames being written keep their pins until the write handler runs.
  srv_.Forget(this);
}

}  // namespace kvtier::internal::memd
