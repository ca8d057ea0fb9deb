#include "tiers/redis/redis_connection.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "io/host_port.h"

namespace kvtier::internal {
namespace {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

timeval ToTimeval(uint32_t ms) {
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

}  // namespace

void RedisReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

Result<RedisEndpoint> ParseRedisEndpoint(std::string_view text) {
  Result<HostPort> hp = SplitHostPort(text, /*allow_port0=*/false);
  if (!hp.ok()) {
    return Status::InvalidArgument("redis server: " + std::string(hp.status().message()) +
                                   "; expected host:port or [IPv6]:port, port 1 to 65535");
  }
  return RedisEndpoint{std::move(hp->host), hp->port};
}

Status FromRedisError(std::string_view e, std::string_view op) {
  const std::string msg = std::string(op) + ": " + std::string(e);
  if (StartsWith(e, "OOM")) return Status::ResourceExhausted(msg + " (server maxmemory reached)");
  if (StartsWith(e, "NOPERM")) {
    return Status::InvalidArgument(msg +
                                   " (the redis user's ACL refuses it; the tier needs PING, "
                                   "and GET, SET, EXISTS and DEL on the keys under key_prefix; "
                                   "GETEX too with ttl_s set, SELECT with db set, CLUSTER SLOTS "
                                   "with cluster: true)");
  }
  if (StartsWith(e, "WRONGPASS") || StartsWith(e, "NOAUTH") ||
      e.find("invalid password") != std::string_view::npos ||
      e.find("AUTH <password> called without") != std::string_view::npos) {
    return Status::InvalidArgument(msg + " (check the redis user and password)");
  }
  if (StartsWith(e, "LOADING") || StartsWith(e, "BUSY") || StartsWith(e, "TRYAGAIN") ||
      StartsWith(e, "CLUSTERDOWN") || StartsWith(e, "MASTERDOWN") ||
      e.find("max number of clients reached") != std::string_view::npos) {
    return Status::Unavailable(msg);
  }
  if (StartsWith(e, "WRONGTYPE")) return Status::Corruption(msg + " (not a kvtier block)");
  // A server older than 6.2 (one not reachable when the tier opened, so not
  // refused then) asked for a read with ttl_s set.
  if (StartsWith(e, "ERR unknown command") &&
      (e.find("GETEX") != std::string_view::npos || e.find("getex") != std::string_view::npos)) {
    return Status::InvalidArgument(msg +
                                   " (with ttl_s set, reads refresh the expiry with GETEX, which "
                                   "needs Redis 6.2 or newer; upgrade the server or set ttl_s: 0)");
  }
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

bool IsRedisTimeout(const Status& s) {
  return s.code() == StatusCode::kUnavailable &&
         s.message().find("timed out") != std::string_view::npos;
}

RedisConnection::RedisConnection(RedisEndpoint endpoint, redisContext* ctx, uint32_t timeout_ms)
    : endpoint_(std::move(endpoint)), ctx_(ctx), timeout_ms_(timeout_ms), in_(kInBufferBytes) {}

RedisConnection::~RedisConnection() {
  tls_.reset();  // its close_notify goes out on the socket redisFree closes
  redisFree(ctx_);
}

Result<std::unique_ptr<RedisConnection>> RedisConnection::Open(const RedisEndpoint& endpoint,
                                                               const RedisTierOptions& options,
                                                               const TlsClientContext* tls) {
  const std::string where = endpoint.ToString();
  // Owned here until the connection takes it: building either may throw.
  std::unique_ptr<redisContext, void (*)(redisContext*)> ctx(
      redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port,
                              ToTimeval(options.connect_timeout_ms)),
      redisFree);
  if (ctx == nullptr || ctx->err != 0)
    return FromRedisContext(ctx.get(), "connect to redis " + where);
  std::unique_ptr<RedisConnection> conn(
      new RedisConnection(endpoint, ctx.get(), options.connect_timeout_ms));
  redisContext* const raw = ctx.release();  // the connection frees it now
  if (tls != nullptr) {
    const std::string& name =
        options.tls_server_name.empty() ? endpoint.host : options.tls_server_name;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options.connect_timeout_ms);
    auto stream = TlsStream::Connect(*tls, raw->fd, name, deadline, "redis " + where);
    if (!stream.ok()) return stream.status();
    conn->tls_ = std::move(stream).value();
  }
  // Setup commands run under the connect timeout, then every call of the
  // data path gets the operation timeout.
  KVTIER_RETURN_IF_ERROR(conn->SetTimeout(options.connect_timeout_ms));
  // The hiredis reader is never used: a setup reply is read with the
  // connection's own, which bounds what a server can make it allocate.
  auto setup = [&conn, &options](std::span<const std::string_view> argv, const std::string& op) {
    auto reply = conn->Call(argv, RespLimits{});
    if (!reply.ok() && conn->closed_by_peer_ && conn->received_bytes_ == 0) {
      // Dropped before a first reply: a TLS port drops a client whose first
      // bytes are not a handshake, and a server that requires a client
      // certificate drops one without (its alert may be lost to the reset).
      const char* hint = conn->tls_ == nullptr ? " (if the server takes TLS only, set tls: true)"
                         : options.tls_cert_file.empty()
                             ? " (if the server requires a client certificate, set "
                               "tls_cert_file and tls_key_file)"
                             : "";
      const Status st = reply.status().WithContext(op);
      if (*hint != '\0') return Status(st.code(), std::string(st.message()) + hint);
    }
    if (!reply.ok()) return reply.status().WithContext(op);
    if (reply->kind == RespHead::Kind::kError) return FromRedisError(reply->text, op);
    return Status::Ok();
  };
  if (!options.password.empty()) {
    std::vector<std::string_view> argv = {"AUTH"};
    if (!options.user.empty()) argv.push_back(options.user);
    argv.push_back(options.password);
    KVTIER_RETURN_IF_ERROR(setup(argv, "AUTH to redis " + where));
  }
  if (options.db != 0) {
    const std::string db = std::to_string(options.db);
    std::string_view argv[] = {"SELECT", db};
    KVTIER_RETURN_IF_ERROR(setup(argv, "SELECT " + db + " on redis " + where));
  }
  // A server that wants a password answers PING with NOAUTH: report it here,
  // at open, rather than on the first batch.
  std::string_view ping[] = {"PING"};
  KVTIER_RETURN_IF_ERROR(setup(ping, "PING redis " + where));
  KVTIER_RETURN_IF_ERROR(conn->SetTimeout(options.op_timeout_ms));
  return conn;
}

Status RedisConnection::SetTimeout(uint32_t timeout_ms) {
  if (redisSetTimeout(ctx_, ToTimeval(timeout_ms)) != REDIS_OK) {
    return Fail(FromRedisContext(ctx_, "set timeout on redis " + endpoint_.ToString()));
  }
  timeout_ms_ = timeout_ms;
  rcv_timeout_ms_ = timeout_ms;
  return Status::Ok();
}

Status RedisConnection::SetReceiveTimeout(uint32_t ms) {
  if (rcv_timeout_ms_ == ms) return Status::Ok();
  const timeval tv = ToTimeval(ms);
  if (setsockopt(ctx_->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
    return Fail(Status::Unavailable(
        FromErrno(errno, "set timeout on redis " + endpoint_.ToString()).message()));
  }
  rcv_timeout_ms_ = ms;
  return Status::Ok();
}

uint32_t RedisConnection::WaitLeftMs(std::chrono::steady_clock::time_point deadline) const {
  const int64_t left_ms =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
          .count();
  if (left_ms <= 0) return 0;
  return static_cast<uint32_t>(std::min<int64_t>(left_ms, timeout_ms_));
}

uint64_t RedisConnection::ByteBudgetMs(uint64_t bytes) {
  // 4096 bytes a millisecond; capped at a day, so a length no reply really
  // has cannot overflow the clock.
  constexpr uint64_t kFloorBytesPerMs = 4096;
  constexpr uint64_t kMaxMs = 24ull * 3600 * 1000;
  return std::min(bytes / kFloorBytesPerMs + 1, kMaxMs);
}

Status RedisConnection::Fail(Status st) {
  broken_ = true;
  return st;
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
  uint64_t total = 0;
  for (const Piece& p : pieces_) total += p.len;
  const uint64_t budget_ms = timeout_ms_ + ByteBudgetMs(total);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(budget_ms);
  Status st = tls_ != nullptr ? FlushTls(deadline, budget_ms) : FlushPlain(deadline, budget_ms);
  scratch_.clear();
  pieces_.clear();
  return st.ok() ? st : Fail(std::move(st));
}

bool RedisConnection::WaitSocket(short events, uint32_t wait_ms, const std::string& where,
                                 Status* error) const {
  pollfd pfd{ctx_->fd, events, 0};
  // Clamped: a wait past INT_MAX ms would be negative, which poll reads as
  // "forever".
  const int ready = poll(&pfd, 1, static_cast<int>(std::min<uint32_t>(wait_ms, INT_MAX)));
  if (ready == 0) return false;
  if (ready < 0 && errno != EINTR) *error = Status::Unavailable(FromErrno(errno, where).message());
  return true;
}

Status RedisConnection::FlushPlain(std::chrono::steady_clock::time_point deadline,
                                   uint64_t budget_ms) {
  std::vector<iovec> iov;
  iov.reserve(pieces_.size());
  for (const Piece& p : pieces_) {
    const void* base = p.borrowed != nullptr ? static_cast<const void*>(p.borrowed)
                                             : static_cast<const void*>(scratch_.data() + p.offset);
    iov.push_back({const_cast<void*>(base), p.len});
  }
  const std::string where = "send to redis " + endpoint_.ToString();
  size_t first = 0;
  while (first < iov.size()) {
    const uint32_t wait_ms = WaitLeftMs(deadline);
    if (wait_ms == 0) return TimedOut(where, budget_ms);
    // Waits for room with poll, then sends what fits without blocking. A
    // blocking send under SO_SNDTIMEO would not do: one that moved a few
    // bytes before its timer ran out returns them, and the next waits a whole
    // timeout again, so a server that stopped reading mid-batch (frozen, its
    // buffers full) was caught only after two or three timeouts. Here each
    // wait starts when the last bytes moved.
    Status error;
    if (!WaitSocket(POLLOUT, wait_ms, where, &error)) {
      // A wait cut short by the deadline reports the send's whole budget.
      return TimedOut(where, wait_ms < timeout_ms_ ? budget_ms : timeout_ms_);
    }
    if (!error.ok()) return error;
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    // MSG_NOSIGNAL: a server that went away must not kill the process.
    ssize_t n = sendmsg(ctx_->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) {
      closed_by_peer_ = errno == EPIPE || errno == ECONNRESET;
      Status st = FromErrno(errno, where);
      return st.code() == StatusCode::kUnavailable ? st : Status::Unavailable(st.message());
    }
    auto left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
