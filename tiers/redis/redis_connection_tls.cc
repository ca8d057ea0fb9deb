// The TLS half of RedisConnection's transport: the same deadlines as the
// plain socket path, with OpenSSL's reads and writes (which never block)
// waited on by poll.
#include <poll.h>

#include <string>

#include "tiers/redis/redis_connection.h"

namespace kvtier::internal {
namespace {

short PollEvents(TlsStream::Io io) { return io == TlsStream::Io::kWantRead ? POLLIN : POLLOUT; }

}  // namespace

Status RedisConnection::RecvTls(void* out, size_t size, size_t* got) {
  const std::string where = "read from redis " + endpoint_.ToString();
  for (;;) {
    uint32_t wait_ms = 0;
    KVTIER_RETURN_IF_ERROR(NextReadWait(&wait_ms));
    const TlsStream::IoResult r = tls_->Read(out, size);
    switch (r.io) {
      case TlsStream::Io::kMoved:
        *got = r.bytes;
        received_bytes_ += r.bytes;
        return Status::Ok();
      case TlsStream::Io::kWantRead:
      case TlsStream::Io::kWantWrite: {
        Status error;
        if (!WaitSocket(PollEvents(r.io), wait_ms, where, &error)) {
          // A wait cut short by the deadline reports the reply's whole budget.
          return Fail(TimedOut(where, wait_ms < timeout_ms_ ? reply_budget_ms_ : timeout_ms_));
        }
        if (!error.ok()) return Fail(std::move(error));
        continue;
      }
      case TlsStream::Io::kClosed:
        closed_by_peer_ = true;
        return Fail(Status::Unavailable(where + ": connection closed by the server"));
      case TlsStream::Io::kFailed:
        return Fail(Status::Unavailable(where + ": " + std::string(r.error.message())));
    }
  }
}

Status RedisConnection::SendTls(const std::byte* data, size_t size,
                                std::chrono::steady_clock::time_point deadline,
                                uint64_t budget_ms) {
  const std::string where = "send to redis " + endpoint_.ToString();
  while (size > 0) {
    const uint32_t wait_ms = WaitLeftMs(deadline);
    if (wait_ms == 0) return TimedOut(where, budget_ms);
    const TlsStream::IoResult r = tls_->Write(data, size);
    switch (r.io) {
      case TlsStream::Io::kMoved:
        data += r.bytes;
        size -= r.bytes;
        continue;
      case TlsStream::Io::kWantRead:
      case TlsStream::Io::kWantWrite: {
        Status error;
        if (!WaitSocket(PollEvents(r.io), wait_ms, where, &error)) {
          return TimedOut(where, wait_ms < timeout_ms_ ? budget_ms : timeout_ms_);
        }
        if (!error.ok()) return error;
        continue;
      }
      case TlsStream::Io::kClosed:
        closed_by_peer_ = true;
        return Status::Unavailable(where + ": connection closed by the server");
      case TlsStream::Io::kFailed:
        return Status::Unavailable(where + ": " + std::string(r.error.message()));
    }
  }
  return Status::Ok();
}

// Small pieces (command headers, keys) are gathered and sent as one record;
// a large one (a block's payload) is encrypted straight from the caller's
// memory.
Status RedisConnection::FlushTls(std::chrono::steady_clock::time_point deadline,
                                 uint64_t budget_ms) {
  std::string gathered;
  gathered.reserve(kTlsGatherBytes);
  auto send_gathered = [&]() -> Status {
    if (gathered.empty()) return Status::Ok();
    Status st = SendTls(reinterpret_cast<const std::byte*>(gathered.data()), gathered.size(),
                        deadline, budget_ms);
    gathered.clear();
    return st;
  };
  for (const Piece& p : pieces_) {
    const std::byte* base = p.borrowed != nullptr
                                ? p.borrowed
                                : reinterpret_cast<const std::byte*>(scratch_.data() + p.offset);
    if (p.len >= kTlsGatherBytes) {
      KVTIER_RETURN_IF_ERROR(send_gathered());
      KVTIER_RETURN_IF_ERROR(SendTls(base, p.len, deadline, budget_ms));
      continue;
    }
    if (gathered.size() + p.len > kTlsGatherBytes) KVTIER_RETURN_IF_ERROR(send_gathered());
    gathered.append(reinterpret_cast<const char*>(base), p.len);
  }
  return send_gathered();
}

bool RedisConnection::ReusableTls() {
  if (tls_->Pending() > 0) {
    broken_ = true;  // decrypted bytes nobody asked for
    return false;
  }
  // Peeking also takes in what the server may send between replies that is
  // not data (TLS 1.3 session tickets, key updates).
  char byte = 0;
  const TlsStream::IoResult r = tls_->Peek(&byte, 1);
  if (r.io == TlsStream::Io::kWantRead || r.io == TlsStream::Io::kWantWrite) return true;
  // kMoved: a reply to nothing; kClosed: the server closed or reset it.
  closed_by_peer_ = r.io != TlsStream::Io::kMoved;
  broken_ = true;
  return false;
}

}  // namespace kvtier::internal
