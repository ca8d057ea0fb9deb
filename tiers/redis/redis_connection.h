// One connection to one Redis server: hiredis opens it (connect with a
// timeout, AUTH, SELECT) and runs the setup and control commands; the
// pipelined data path formats RESP itself and moves payloads with
// scatter-gather sends and reads straight into the caller's buffers, so a
// block's bytes are copied by the kernel only.
//
// Thread safety: none. A connection is owned and used by one thread at a time
// (an I/O thread of a RedisNode, or the opening thread before handing it over).
// Once any call fails with a transport error the connection is broken() and
// must be dropped.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/redis_options.h"
#include "kvtier/status.h"

struct redisContext;
struct redisReply;

namespace kvtier::internal {

struct RedisEndpoint {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const RedisEndpoint&, const RedisEndpoint&) = default;
};

// Parses "host:port" (port 1..65535). InvalidArgument naming the entry.
Result<RedisEndpoint> ParseRedisEndpoint(std::string_view text);

struct RedisReplyDeleter {
  void operator()(redisReply* r) const;
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

// The one place that turns Redis failures into Status values. `op` names
// what was being done ("GET kvtier:...", "AUTH to 127.0.0.1:6390").
//  - context errors: connection refused/reset/closed and timeouts are
//    Unavailable (retryable), protocol errors Corruption.
//  - error replies: OOM -> ResourceExhausted; WRONGPASS/NOAUTH/NOPERM ->
//    InvalidArgument (a configuration error, not retryable); LOADING, BUSY,
//    TRYAGAIN, CLUSTERDOWN, MASTERDOWN -> Unavailable; WRONGTYPE ->
//    Corruption; an oversized value (proto-max-bulk-len) -> InvalidArgument;
//    anything else IOError.
Status FromRedisContext(const redisContext* ctx, std::string_view op);
Status FromRedisReply(const redisReply* reply, std::string_view op);
Status FromRedisError(std::string_view error_text, std::string_view op);

// The head of one RESP reply read by the data path.
struct RespHead {
  enum class Kind { kStatus, kError, kInteger, kBulk, kNil, kArray };
  Kind kind = Kind::kNil;
  std::string text;     // kStatus / kError: the line without the type byte
  int64_t integer = 0;  // kInteger: the value; kBulk: the body length; kArray: items
};

class RedisConnection {
 public:
  // Connects within options.connect_timeout_ms, sets the per-call timeout
  // to options.op_timeout_ms, then AUTH (user + password, or password only)
  // and SELECT when configured. Unavailable when the server cannot be
  // reached; InvalidArgument for refused credentials.
  static Result<std::unique_ptr<RedisConnection>> Open(const RedisEndpoint& endpoint,
                                                       const RedisTierOptions& options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  const RedisEndpoint& endpoint() const { return endpoint_; }
  bool broken() const { return broken_; }
  // Marks the connection broken (its reply stream is out of step).
  void Abandon() { broken_ = true; }

  // A synchronous command through hiredis (setup and control only; never
  // while a pipeline is queued). Error replies come back as replies.
  Result<RedisReplyPtr> Command(std::span<const std::string_view> argv);

  // Queues a command for the next Flush(); its arguments are copied.
  void Queue(std::span<const std::string_view> argv);
  // Queues `argv`, then one argument made of `value_parts` concatenated, then
  // `trailing_args`. The value parts are sent from the caller's memory, which
  // must stay valid until Flush() returns.
  void QueueWithValue(std::span<const std::string_view> argv,
                      std::span<const std::span<const std::byte>> value_parts,
                      std::span<const std::string_view> trailing_args);
  // Sends everything queued. Unavailable on a transport error or timeout.
  Status Flush();

  // Reads the head of the next reply. For kBulk the body (integer bytes)
  // and its CRLF follow: consume them with ReadBody/SkipBody. Corruption,
  // leaving the connection broken, for a malformed line or one longer than
  // 64 KiB.
  Result<RespHead> ReadHead();
  Status ReadBody(std::span<std::byte> out);  // exactly out.size() bytes of the body
  Status SkipBody(uint64_t bytes);            // discards bytes of the body
  Status EndBody();                           // consumes the CRLF after a body
  // The reply to a control command such as ASKING: ReadHead plus, for a
  // bulk, the whole body as text. Corruption, leaving the connection broken,
  // for an array or a bulk over 64 KiB.
  Result<RespHead> ReadSimple();

 private:
  RedisConnection(RedisEndpoint endpoint, redisContext* ctx, uint32_t op_timeout_ms);
  Status Fail(Status st);
  Status FillBuffer();
  Status ReadError(ssize_t n) const;
  Result<RespHead> ParseHead(char type, std::string_view line);
  void AddCopied(std::string_view bytes);

  RedisEndpoint endpoint_;
  redisContext* ctx_;
  uint32_t op_timeout_ms_;
  bool broken_ = false;
  // Outgoing: `scratch_` holds copied bytes; iovecs point into it (by
  // offset until Flush) or at borrowed memory.
  std::string scratch_;
  struct Piece {
    const std::byte* borrowed;  // null: scratch_[offset, offset + len)
    size_t offset;
    size_t len;
  };
  std::vector<Piece> pieces_;
  // Incoming: bytes read but not yet consumed are in_[in_pos_, in_end_).
  std::vector<char> in_;
  size_t in_pos_ = 0;
  size_t in_end_ = 0;
};

}  // namespace kvtier::internal
