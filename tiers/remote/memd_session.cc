// One memd connection (Session): reading frames off the socket, writing
// replies in batches, refusing a peer that breaks the protocol, and closing.
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "tiers/remote/memd_server_impl.h"

namespace kvtier::internal::memd {
namespace {

constexpr size_t kDiscardChunk = 64 * 1024;
constexpr size_t kMaxFramesPerWrite = 64;

}  // namespace

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

}  // namespace kvtier::internal::memd
