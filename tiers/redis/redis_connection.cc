#include "tiers/redis/redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>

namespace kvtier::internal {
namespace {

constexpr size_t kInBufferBytes = 256 * 1024;
// Reads at least this large go straight into the caller's buffer.
constexpr size_t kDirectReadBytes = 16 * 1024;
// No reply line (status, error, integer, length) nor the reply to a control
// command comes near this; a line is kept in in_, which never grows.
constexpr size_t kMaxSimpleReplyBytes = 64 * 1024;
static_assert(kMaxSimpleReplyBytes < kInBufferBytes);

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

timeval ToTimeval(uint32_t ms) {
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

}  // namespace

void RedisReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

Result<RedisEndpoint> ParseRedisEndpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Status::InvalidArgument("redis server '" + std::string(text) +
                                   "' is not host:port; expected e.g. 127.0.0.1:6379");
  }
  std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    return Status::InvalidArgument("redis server '" + std::string(text) +
                                   "' has a bad port; expected 1 to 65535");
  }
  return RedisEndpoint{std::string(text.substr(0, colon)), static_cast<uint16_t>(port)};
}

Status FromRedisError(std::string_view e, std::string_view op) {
  const std::string msg = std::string(op) + ": " + std::string(e);
  if (StartsWith(e, "OOM")) return Status::ResourceExhausted(msg + " (server maxmemory reached)");
  if (StartsWith(e, "WRONGPASS") || StartsWith(e, "NOAUTH") || StartsWith(e, "NOPERM") ||
      e.find("invalid password") != std::string_view::npos ||
      e.find("AUTH <password> called without") != std::string_view::npos) {
    return Status::InvalidArgument(msg + " (check the redis user and password)");
  }
  if (StartsWith(e, "LOADING") || StartsWith(e, "BUSY") || StartsWith(e, "TRYAGAIN") ||
      StartsWith(e, "CLUSTERDOWN") || StartsWith(e, "MASTERDOWN")) {
    return Status::Unavailable(msg);
  }
  if (StartsWith(e, "WRONGTYPE")) return Status::Corruption(msg + " (not a kvtier block)");
  if (e.find("invalid bulk length") != std::string_view::npos ||
      e.find("proto-max-bulk-len") != std::string_view::npos) {
    return Status::InvalidArgument(msg + " (value larger than the server's proto-max-bulk-len)");
  }
  return Status::IOError(msg);
}

Status FromRedisContext(const redisContext* ctx, std::string_view op) {
  if (ctx == nullptr) return Status::Unavailable(std::string(op) + ": cannot allocate a context");
  const std::string msg = std::string(op) + ": " + ctx->errstr;
  switch (ctx->err) {
    case REDIS_ERR_IO:
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINPROGRESS ||
          std::strstr(ctx->errstr, "temporarily unavailable") != nullptr ||
          std::strstr(ctx->errstr, "timed out") != nullptr) {
        return Status::Unavailable(std::string(op) + ": timed out");
      }
      return Status::Unavailable(msg);
    case REDIS_ERR_EOF:
      return Status::Unavailable(std::string(op) + ": connection closed by the server");
    case REDIS_ERR_PROTOCOL:
      return Status::Corruption(msg);
    case 0:
      return Status::Ok();
    default:
      return Status::Unavailable(msg);
  }
}

Status FromRedisReply(const redisReply* reply, std::string_view op) {
  if (reply == nullptr) return Status::Unavailable(std::string(op) + ": no reply");
  if (reply->type != REDIS_REPLY_ERROR) return Status::Ok();
  return FromRedisError(std::string_view(reply->str, reply->len), op);
}

RedisConnection::RedisConnection(RedisEndpoint endpoint, redisContext* ctx, uint32_t op_timeout_ms)
    : endpoint_(std::move(endpoint)),
      ctx_(ctx),
      op_timeout_ms_(op_timeout_ms),
      in_(kInBufferBytes) {}

RedisConnection::~RedisConnection() { redisFree(ctx_); }

Result<std::unique_ptr<RedisConnection>> RedisConnection::Open(const RedisEndpoint& endpoint,
                                                               const RedisTierOptions& options) {
  const std::string where = endpoint.ToString();
  redisContext* ctx = redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port,
                                              ToTimeval(options.connect_timeout_ms));
  if (ctx == nullptr || ctx->err != 0) {
    Status st = FromRedisContext(ctx, "connect to redis " + where);
    redisFree(ctx);
    return st;
  }
  std::unique_ptr<RedisConnection> conn(new RedisConnection(endpoint, ctx, options.op_timeout_ms));
  // Setup commands run under the connect timeout, then every call of the
  // data path gets the operation timeout.
  if (redisSetTimeout(ctx, ToTimeval(options.connect_timeout_ms)) != REDIS_OK) {
    return FromRedisContext(ctx, "set timeout on redis " + where);
  }
  if (!options.password.empty()) {
    std::vector<std::string_view> argv = {"AUTH"};
    if (!options.user.empty()) argv.push_back(options.user);
    argv.push_back(options.password);
    auto reply = conn->Command(argv);
    if (!reply.ok()) return reply.status();
    KVTIER_RETURN_IF_ERROR(FromRedisReply(reply->get(), "AUTH to redis " + where));
  }
  if (options.db != 0) {
    const std::string db = std::to_string(options.db);
    std::string_view argv[] = {"SELECT", db};
    auto reply = conn->Command(argv);
    if (!reply.ok()) return reply.status();
    KVTIER_RETURN_IF_ERROR(FromRedisReply(reply->get(), "SELECT " + db + " on redis " + where));
  }
  // A server that wants a password answers PING with NOAUTH: report it here,
  // at open, rather than on the first batch.
  std::string_view ping[] = {"PING"};
  auto pong = conn->Command(ping);
  if (!pong.ok()) return pong.status();
  KVTIER_RETURN_IF_ERROR(FromRedisReply(pong->get(), "PING redis " + where));
  if (redisSetTimeout(ctx, ToTimeval(options.op_timeout_ms)) != REDIS_OK) {
    return FromRedisContext(ctx, "set timeout on redis " + where);
  }
  return conn;
}

Status RedisConnection::Fail(Status st) {
  broken_ = true;
  return st;
}

Result<RedisReplyPtr> RedisConnection::Command(std::span<const std::string_view> argv) {
  if (broken_) return Status::Unavailable("redis " + endpoint_.ToString() + ": connection broken");
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (std::string_view a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  void* raw = redisCommandArgv(ctx_, static_cast<int>(args.size()), args.data(), lens.data());
  if (raw == nullptr) {
    return Fail(FromRedisContext(
        ctx_, std::string(argv.empty() ? "" : argv[0]) + " on redis " + endpoint_.ToString()));
  }
  return RedisReplyPtr(static_cast<redisReply*>(raw));
}

void RedisConnection::AddCopied(std::string_view bytes) {
  if (!pieces_.empty() && pieces_.back().borrowed == nullptr &&
      pieces_.back().offset + pieces_.back().len == scratch_.size()) {
    pieces_.back().len += bytes.size();
  } else {
    pieces_.push_back({nullptr, scratch_.size(), bytes.size()});
  }
  scratch_.append(bytes);
}

void RedisConnection::Queue(std::span<const std::string_view> argv) {
  QueueWithValue(argv, {}, {});
}

void RedisConnection::QueueWithValue(std::span<const std::string_view> argv,
                                     std::span<const std::span<const std::byte>> value_parts,
                                     std::span<const std::string_view> trailing_args) {
  const bool has_value = !value_parts.empty();
  const size_t count = argv.size() + (has_value ? 1 : 0) + trailing_args.size();
  std::string line = "*" + std::to_string(count) + "\r\n";
  auto add_arg = [&](std::string_view a) {
    line += "$" + std::to_string(a.size()) + "\r\n";
    line.append(a);
    line += "\r\n";
  };
  for (std::string_view a : argv) add_arg(a);
  if (has_value) {
    size_t total = 0;
    for (auto part : value_parts) total += part.size();
    line += "$" + std::to_string(total) + "\r\n";
    AddCopied(line);
    line.clear();
    for (auto part : value_parts) {
      if (!part.empty()) pieces_.push_back({part.data(), 0, part.size()});
    }
    line += "\r\n";
  }
  for (std::string_view a : trailing_args) add_arg(a);
  AddCopied(line);
}

Status RedisConnection::Flush() {
  if (broken_) {
    scratch_.clear();
    pieces_.clear();
    return Status::Unavailable("redis " + endpoint_.ToString() + ": connection broken");
  }
  std::vector<iovec> iov;
  iov.reserve(pieces_.size());
  for (const Piece& p : pieces_) {
    const void* base = p.borrowed != nullptr ? static_cast<const void*>(p.borrowed)
                                             : static_cast<const void*>(scratch_.data() + p.offset);
    iov.push_back({const_cast<void*>(base), p.len});
  }
  Status st;
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    // MSG_NOSIGNAL: a server that went away must not kill the process.
    ssize_t n = sendmsg(ctx_->fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = (errno == EAGAIN || errno == EWOULDBLOCK)
               ? Status::Unavailable("send to redis " + endpoint_.ToString() +
                                     ": timed out after " + std::to_string(op_timeout_ms_) + " ms")
               : FromErrno(errno, "send to redis " + endpoint_.ToString());
      if (st.code() != StatusCode::kUnavailable) st = Status::Unavailable(st.message());
      break;
    }
    auto left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  scratch_.clear();
  pieces_.clear();
  return st.ok() ? st : Fail(std::move(st));
}

// Reads more bytes into in_, after compacting what is unread to its front.
Status RedisConnection::FillBuffer() {
  if (broken_) return Status::Unavailable("redis " + endpoint_.ToString() + ": connection broken");
  if (in_pos_ > 0) {
    std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
    in_end_ -= in_pos_;
    in_pos_ = 0;
  }
  // Unreachable: lines are capped below the size, bodies read once it is drained.
  if (in_end_ == in_.size()) return Fail(Status::Internal("redis read buffer full"));
  for (;;) {
    ssize_t n = recv(ctx_->fd, in_.data() + in_end_, in_.size() - in_end_, 0);
    if (n > 0) {
      in_end_ += static_cast<size_t>(n);
      return Status::Ok();
    }
    if (n < 0 && errno == EINTR) continue;
    return Fail(ReadError(n));
  }
}

Status RedisConnection::ReadError(ssize_t n) const {
  const std::string where = "read from redis " + endpoint_.ToString();
  if (n == 0) return Status::Unavailable(where + ": connection closed by the server");
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    return Status::Unavailable(where + ": timed out after " + std::to_string(op_timeout_ms_) +
                               " ms");
  }
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
      in_pos_ += (cr - begin) + 2;
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
    ssize_t n = recv(ctx_->fd, out.data() + done, want, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (!(n < 0 && errno == EINTR)) {
      return Fail(ReadError(n));
    }
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
  if (array || (head->kind == RespHead::Kind::kBulk && head->integer > kMaxSimpleReplyBytes)) {
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

}  // namespace kvtier::internal
