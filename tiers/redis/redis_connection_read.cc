// The reading half of RedisConnection: the RESP reader shared by the data
// path (reply heads, bodies read into the caller's buffers) and the setup and
// control commands (whole replies, bounded by RespLimits).
#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "tiers/redis/redis_connection.h"

namespace kvtier::internal {
namespace {

// Reads at least this large go straight into the caller's buffer.
constexpr size_t kDirectReadBytes = 16 * 1024;
// No reply line (status, error, integer, length) nor the reply to a control
// command comes near this; a line is kept in in_, which never grows.
constexpr size_t kMaxSimpleReplyBytes = 64 * 1024;

}  // namespace

// Reads more bytes into in_, after compacting what is unread to its front.
Status RedisConnection::FillBuffer() {
  static_assert(kMaxSimpleReplyBytes < kInBufferBytes);
  if (broken_) return Status::Unavailable("redis " + endpoint_.ToString() + ": connection broken");
  if (in_pos_ > 0) {
    std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
    in_end_ -= in_pos_;
    in_pos_ = 0;
  }
  // Unreachable: lines are capped below the size, bodies read once it is drained.
  if (in_end_ == in_.size()) return Fail(Status::Internal("redis read buffer full"));
  size_t n = 0;
  KVTIER_RETURN_IF_ERROR(Recv(in_.data() + in_end_, in_.size() - in_end_, &n));
  in_end_ += n;
  return Status::Ok();
}

// One recv of at least a byte. While a reply is read under a deadline, the
// socket's receive timeout is first cut to what is left before it, so a
// server that trickles bytes cannot stretch the wait.
Status RedisConnection::Recv(void* out, size_t size, size_t* got) {
  if (tls_ != nullptr) return RecvTls(out, size, got);
  for (;;) {
    uint32_t wait_ms = 0;
    KVTIER_RETURN_IF_ERROR(NextReadWait(&wait_ms));
    KVTIER_RETURN_IF_ERROR(SetReceiveTimeout(wait_ms));
    const ssize_t n = recv(ctx_->fd, out, size, 0);
    if (n > 0) {
      *got = static_cast<size_t>(n);
      received_bytes_ += *got;
      return Status::Ok();
    }
    if (n < 0 && errno == EINTR) continue;
    closed_by_peer_ = n == 0 || errno == ECONNRESET || errno == EPIPE;
    // A wait cut short by the deadline reports the reply's whole budget.
    return Fail(ReadError(n, wait_ms < timeout_ms_ ? reply_budget_ms_ : timeout_ms_));
  }
}

Status RedisConnection::NextReadWait(uint32_t* wait_ms) {
  *wait_ms = timeout_ms_;
  if (!has_reply_deadline_) return Status::Ok();
  *wait_ms = WaitLeftMs(reply_deadline_);
  if (*wait_ms > 0) return Status::Ok();
  return Fail(TimedOut("read from redis " + endpoint_.ToString(), reply_budget_ms_));
}

void RedisConnection::BeginReply() {
  reply_budget_ms_ = timeout_ms_;
  reply_deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  has_reply_deadline_ = true;
}

void RedisConnection::ExtendReply(uint64_t bytes) {
  const uint64_t ms = ByteBudgetMs(bytes);
  reply_budget_ms_ += ms;
  reply_deadline_ += std::chrono::milliseconds(ms);
}

bool RedisConnection::Reusable() {
  if (broken_) return false;
  if (in_pos_ != in_end_) {
    broken_ = true;  // unread bytes: the stream is out of step
    return false;
  }
  if (tls_ != nullptr) return ReusableTls();
  for (;;) {
    char byte = 0;
    const ssize_t n = recv(ctx_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // 0: the server closed it; > 0: a reply to nothing; else an error (reset).
    closed_by_peer_ = n <= 0;
    broken_ = true;
    return false;
  }
}

Status RedisConnection::TimedOut(const std::string& what, uint64_t after_ms) const {
  return Status::Unavailable(what + ": timed out after " + std::to_string(after_ms) + " ms");
}

Status RedisConnection::ReadError(ssize_t n, uint64_t timeout_ms) const {
  const std::string where = "read from redis " + endpoint_.ToString();
  if (n == 0) return Status::Unavailable(where + ": connection closed by the server");
  if (errno == EAGAIN || errno == EWOULDBLOCK) return TimedOut(where, timeout_ms);
  return Status::Unavailable(where + ": " + std::strerror(errno));
}

Result<RespHead> RedisConnection::ReadHead() {
  // Unread bytes already searched for the CR (FillBuffer keeps them unread).
  size_t scanned = 0;
  for (;;) {
    const char* begin = in_.data() + in_pos_;
    const char* end = in_.data() + in_end_;
    const char* cr = static_cast<const char*>(memchr(begin + scanned, '\r', end - begin - scanned));
    if (cr != nullptr && cr + 1 < end) {
      if (cr[1] != '\n' || cr == begin) {
        return Fail(Status::Corruption("redis " + endpoint_.ToString() + ": malformed reply"));
      }
      std::string_view line(begin + 1, cr - begin - 1);
      const char type = *begin;
      last_line_bytes_ = static_cast<size_t>(cr - begin) + 2;
      in_pos_ += last_line_bytes_;
      return ParseHead(type, line);
    }
    // A CR that is the last byte read is looked at again once its LF is in.
    scanned = static_cast<size_t>((cr != nullptr ? cr : end) - begin);
    if (scanned >= kMaxSimpleReplyBytes) {
      return Fail(Status::Corruption("redis " + endpoint_.ToString() + ": reply line longer than " +
                                     std::to_string(kMaxSimpleReplyBytes) + " bytes"));
    }
    KVTIER_RETURN_IF_ERROR(FillBuffer());
  }
}

Result<RespHead> RedisConnection::ParseHead(char type, std::string_view line) {
  RespHead head;
  if (type == '+' || type == '-') {
    head.kind = type == '+' ? RespHead::Kind::kStatus : RespHead::Kind::kError;
    head.text = std::string(line);
    return head;
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
  if ((type != ':' && type != '$' && type != '*') || ec != std::errc() ||
      end != line.data() + line.size()) {
    return Fail(Status::Corruption("redis " + endpoint_.ToString() + ": malformed reply line '" +
                                   std::string(1, type) + std::string(line) + "'"));
  }
  head.integer = v;
  if (type == ':') {
    head.kind = RespHead::Kind::kInteger;
  } else if (v < 0) {
    head.kind = RespHead::Kind::kNil;
  } else {
    head.kind = type == '$' ? RespHead::Kind::kBulk : RespHead::Kind::kArray;
  }
  return head;
}

Status RedisConnection::ReadBody(std::span<std::byte> out) {
  size_t done = std::min(out.size(), in_end_ - in_pos_);
  std::memcpy(out.data(), in_.data() + in_pos_, done);
  in_pos_ += done;
  while (done < out.size()) {
    const size_t want = out.size() - done;
    if (want < kDirectReadBytes) {
      KVTIER_RETURN_IF_ERROR(FillBuffer());
      const size_t n = std::min(want, in_end_ - in_pos_);
      std::memcpy(out.data() + done, in_.data() + in_pos_, n);
      in_pos_ += n;
      done += n;
      continue;
    }
    // Large remainders go from the socket straight into the caller's buffer.
    size_t n = 0;
    KVTIER_RETURN_IF_ERROR(Recv(out.data() + done, want, &n));
    done += n;
  }
  return Status::Ok();
}

Status RedisConnection::SkipBody(uint64_t bytes) {
  while (bytes > 0) {
    if (in_pos_ == in_end_) KVTIER_RETURN_IF_ERROR(FillBuffer());
    const size_t n = std::min<uint64_t>(bytes, in_end_ - in_pos_);
    in_pos_ += n;
    bytes -= n;
  }
  return Status::Ok();
}

Status RedisConnection::EndBody() {
  while (in_end_ - in_pos_ < 2) KVTIER_RETURN_IF_ERROR(FillBuffer());
  if (in_[in_pos_] != '\r' || in_[in_pos_ + 1] != '\n') {
    return Fail(Status::Corruption("redis " + endpoint_.ToString() + ": bulk reply without CRLF"));
  }
  in_pos_ += 2;
  return Status::Ok();
}

Result<RespHead> RedisConnection::ReadSimple() {
  auto head = ReadHead();
  if (!head.ok()) return head;
  // An array's items would be read as the replies of the commands after it.
  const bool array = head->kind == RespHead::Kind::kArray;
  const bool long_bulk = head->kind == RespHead::Kind::kBulk &&
                         head->integer > static_cast<int64_t>(kMaxSimpleReplyBytes);
  if (array || long_bulk) {
    return Fail(Status::Corruption("redis " + endpoint_.ToString() + ": " +
                                   (array ? "array reply of " : "bulk reply of ") +
                                   std::to_string(head->integer) + (array ? " items" : " bytes") +
                                   " to a control command; expected a short status"));
  }
  if (head->kind != RespHead::Kind::kBulk) return head;
  head->text.resize(static_cast<size_t>(head->integer));
  KVTIER_RETURN_IF_ERROR(ReadBody(std::as_writable_bytes(std::span(head->text))));
  KVTIER_RETURN_IF_ERROR(EndBody());
  return head;
}

struct RedisConnection::ValueBudget {
  const RespLimits& limits;
  uint64_t values = 0;
  uint64_t bytes = 0;
};

Result<RespValue> RedisConnection::Call(std::span<const std::string_view> argv,
                                        const RespLimits& limits) {
  Queue(argv);
  KVTIER_RETURN_IF_ERROR(Flush());
  BeginReply();
  auto reply = ReadValue(limits);
  EndReply();
  return reply;
}

Result<RespValue> RedisConnection::ReadValue(const RespLimits& limits) {
  ValueBudget budget{limits};
  return ReadValueAt(budget, 0);
}

// `depth` counts the arrays around the value. Every limit is checked before
// the memory it guards is allocated: an array's items before reserving them,
// a bulk's length before its body.
Result<RespValue> RedisConnection::ReadValueAt(ValueBudget& budget, uint32_t depth) {
  const RespLimits& limits = budget.limits;
  auto over = [this](const std::string& what, uint64_t limit, const std::string& unit,
                     const std::string& detail = "") {
    return Fail(Status::Corruption("redis " + endpoint_.ToString() + ": " + what +
                                   " exceeds the limit of " + std::to_string(limit) + " " + unit +
                                   detail));
  };
  if (++budget.values > limits.max_items) return over("reply", limits.max_items, "values");
  auto head = ReadHead();
  if (!head.ok()) return head.status();
  budget.bytes += last_line_bytes_;
  if (budget.bytes > limits.max_total_bytes) {
    return over("reply", limits.max_total_bytes, "bytes");
  }
  RespValue value;
  value.kind = head->kind;
  switch (head->kind) {
    case RespHead::Kind::kStatus:
    case RespHead::Kind::kError:
      value.text = std::move(head->text);
      return value;
    case RespHead::Kind::kInteger:
      value.integer = head->integer;
      return value;
    case RespHead::Kind::kNil:
      return value;
    case RespHead::Kind::kBulk: {
      const auto len = static_cast<uint64_t>(head->integer);
      if (len > limits.max_bulk_bytes) {
        return over("bulk string of " + std::to_string(len) + " bytes in a reply",
                    limits.max_bulk_bytes, "bytes");
      }
      if (len + 2 > limits.max_total_bytes - budget.bytes) {
        return over("reply", limits.max_total_bytes, "bytes");
      }
      budget.bytes += len + 2;
      value.text.resize(len);
      KVTIER_RETURN_IF_ERROR(ReadBody(std::as_writable_bytes(std::span(value.text))));
      KVTIER_RETURN_IF_ERROR(EndBody());
      return value;
    }
    case RespHead::Kind::kArray: {
      const auto count = static_cast<uint64_t>(head->integer);
      if (depth >= limits.max_depth) {
        return over("reply's array nesting", limits.max_depth, "levels");
      }
      if (count > limits.max_items - budget.values) {
        return over(
            "reply", limits.max_items, "values",
            ": an array of " + std::to_string(count) + " after " + std::to_string(budget.values));
      }
      value.items.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        auto item = ReadValueAt(budget, depth + 1);
        if (!item.ok()) return item;
        value.items.push_back(std::move(item).value());
      }
      return value;
    }
  }
  return Fail(Status::Internal("redis reply of an unknown kind"));
}

}  // namespace kvtier::internal
