// One connection to one Redis server: hiredis connects it (with a timeout);
// everything after that, the setup and control commands (AUTH, SELECT, PING,
// CONFIG GET, CLUSTER SLOTS) included, goes through the connection's own
// RESP writer and bounded reader. The pipelined data path moves payloads
// with scatter-gather sends and reads straight into the caller's buffers, so
// a block's bytes are copied by the kernel only.
//
// Thread safety: none. A connection is owned and used by one thread at a time
// (an I/O thread of a RedisNode, or the opening thread before handing it over).
// Once any call fails with a transport error the connection is broken() and
// must be dropped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/tls_client.h"
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
//    TRYAGAIN, CLUSTERDOWN, MASTERDOWN and a full server ("max number of
//    clients reached") -> Unavailable; WRONGTYPE ->
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

// A whole reply read as a tree (setup and control commands only).
struct RespValue {
  RespHead::Kind kind = RespHead::Kind::kNil;
  std::string text;              // kStatus / kError: the line; kBulk: the body
  int64_t integer = 0;           // kInteger: the value
  std::vector<RespValue> items;  // kArray
};

// Bounds on a reply read by RedisConnection::ReadValue, so a broken or
// hostile server cannot make the reader allocate without limit. The defaults
// fit the short replies of AUTH, SELECT, PING and CONFIG GET.
struct RespLimits {
  uint32_t max_depth = 2;                // arrays nested in arrays; 1: a flat array
  uint64_t max_items = 64;               // values in the whole reply, arrays included
  uint64_t max_bulk_bytes = 64 * 1024;   // body of one bulk string
  uint64_t max_total_bytes = 64 * 1024;  // the whole reply as sent
};

// Whether `s` is a connection's timeout (connect, a send, a reply): each
// says "timed out", as Unavailable.
bool IsRedisTimeout(const Status& s);

class RedisConnection {
 public:
  // Connects, runs the TLS handshake when `tls` is given (options.tls),
  // then AUTH (user + password, or password only) and SELECT when
  // configured, and PING, each within options.connect_timeout_ms; then sets
  // the per-call timeout to options.op_timeout_ms. Unavailable when the
  // server cannot be reached; InvalidArgument for refused credentials or a
  // certificate that fails verification; Corruption for a reply that is
  // malformed or past the RespLimits.
  static Result<std::unique_ptr<RedisConnection>> Open(const RedisEndpoint& endpoint,
                                                       const RedisTierOptions& options,
                                                       const TlsClientContext* tls);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  const RedisEndpoint& endpoint() const { return endpoint_; }
  bool broken() const { return broken_; }
  // Marks the connection broken (its reply stream is out of step).
  void Abandon() { broken_ = true; }
  // For a connection idle between jobs: true when it can carry the next one.
  // False, leaving it broken, when it already is, when bytes nobody asked
  // for are waiting, or when the server has closed or reset it meanwhile
  // (its idle timeout, a restart, a proxy dropping idle connections). Looks
  // at the socket without blocking.
  bool Reusable();
  // The connection broke because the server closed or reset it (EOF,
  // ECONNRESET, EPIPE), not on a timeout or a malformed reply.
  bool closed_by_peer() const { return closed_by_peer_; }
  // Bytes received from the server since the connection opened (after
  // decryption, with TLS).
  uint64_t received_bytes() const { return received_bytes_; }
  // The TLS protocol in use ("TLSv1.3"); empty without TLS.
  std::string_view tls_version() const { return tls_ ? tls_->version() : std::string_view(); }

  // A synchronous command (setup and control only; REQUIRES: nothing queued
  // or unread): sends `argv` and reads its whole reply, which must arrive
  // within the connection's current timeout, within `limits`. Error replies
  // come back as values of kind kError. Unavailable on a transport error or
  // timeout; Corruption naming the limit for a reply past one. Either
  // leaves the connection broken.
  Result<RespValue> Call(std::span<const std::string_view> argv, const RespLimits& limits);

  // Queues a command for the next Flush(); its arguments are copied.
  void Queue(std::span<const std::string_view> argv);
  // Queues `argv`, then one argument made of `value_parts` concatenated, then
  // `trailing_args`. The value parts are sent from the caller's memory, which
  // must stay valid until Flush() returns.
  void QueueWithValue(std::span<const std::string_view> argv,
                      std::span<const std::span<const std::byte>> value_parts,
                      std::span<const std::string_view> trailing_args);
  // Sends everything queued. Unavailable on a transport error or timeout:
  // once no byte could be sent for the timeout (a server that stopped
  // reading), or past the timeout plus ByteBudgetMs() of the size in all,
  // so a server that reads a byte at a time cannot hold it.
  Status Flush();

  // The data path bounds each reply as a whole: from BeginReply() to
  // EndReply(), every read ends by a deadline of the connection's timeout
  // from now, moved on by ExtendReply(bytes) for a body about to be read
  // (ByteBudgetMs of its size). Bytes that trickle in, each within the
  // per-read timeout, thus fail the reply (Unavailable, connection broken)
  // once the deadline passes instead of holding the thread for hours.
  void BeginReply();
  void ExtendReply(uint64_t bytes);
  void EndReply() { has_reply_deadline_ = false; }
  // Time allowed for moving `bytes` on top of the timeout: the size at a
  // floor rate of 4 MiB/s, far below any network a block store runs on
  // and still seconds, not hours, for the largest block.
  static uint64_t ByteBudgetMs(uint64_t bytes);

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
  // Reads the next reply whole, arrays included, within `limits`.
  // Corruption naming the limit, leaving the connection broken, for a reply
  // past one; nothing larger than a limit is allocated.
  Result<RespValue> ReadValue(const RespLimits& limits);

 private:
  struct ValueBudget;
  static constexpr size_t kInBufferBytes = 256 * 1024;
  // Pieces smaller than this are gathered into one TLS record's worth of
  // plaintext before they are encrypted: one record and one send, not one
  // each for every command header.
  static constexpr size_t kTlsGatherBytes = 16 * 1024;

  RedisConnection(RedisEndpoint endpoint, redisContext* ctx, uint32_t timeout_ms);
  Status SetTimeout(uint32_t timeout_ms);
  Status Fail(Status st);
  Status FillBuffer();
  Status Recv(void* out, size_t size, size_t* got);
  // The wait allowed for the next read: timeout_ms_, or what is left before
  // the reply's deadline; a timeout (connection broken) once none is.
  Status NextReadWait(uint32_t* wait_ms);
  // Flush's send of pieces_ on the plain socket, and (with the other TLS
  // halves of Recv and Reusable, in redis_connection_tls.cc) over TLS.
  Status FlushPlain(std::chrono::steady_clock::time_point deadline, uint64_t budget_ms);
  Status RecvTls(void* out, size_t size, size_t* got);
  Status FlushTls(std::chrono::steady_clock::time_point deadline, uint64_t budget_ms);
  Status SendTls(const std::byte* data, size_t size, std::chrono::steady_clock::time_point deadline,
                 uint64_t budget_ms);
  // Waits up to wait_ms for the socket to be ready for `events` (POLLIN,
  // POLLOUT): false on a timeout; true when it is, when a signal cut the wait
  // short (the caller tries again), or on a poll failure, which sets *error
  // naming `where`.
  bool WaitSocket(short events, uint32_t wait_ms, const std::string& where, Status* error) const;
  bool ReusableTls();
  // Sets the socket's SO_RCVTIMEO to `ms` unless it holds that already.
  Status SetReceiveTimeout(uint32_t ms);
  // The wait left before `deadline`, at most timeout_ms_; 0 once it passed.
  uint32_t WaitLeftMs(std::chrono::steady_clock::time_point deadline) const;
  Status ReadError(ssize_t n, uint64_t timeout_ms) const;
  Status TimedOut(const std::string& what, uint64_t after_ms) const;
  Result<RespValue> ReadValueAt(ValueBudget& budget, uint32_t depth);
  Result<RespHead> ParseHead(char type, std::string_view line);
  void AddCopied(std::string_view bytes);

  RedisEndpoint endpoint_;
  redisContext* ctx_;
  std::unique_ptr<TlsStream> tls_;  // null without TLS; ends before ctx_ closes the socket
  uint32_t timeout_ms_;  // the socket's send and receive timeout
  bool broken_ = false;
  bool closed_by_peer_ = false;
  uint64_t received_bytes_ = 0;
  uint32_t rcv_timeout_ms_ = 0;  // what the socket's SO_RCVTIMEO is; 0: unknown
  // While a reply is read (Call, or BeginReply to EndReply): every receive
  // ends by this time, reply_budget_ms_ after the reply began.
  std::chrono::steady_clock::time_point reply_deadline_{};
  uint64_t reply_budget_ms_ = 0;
  bool has_reply_deadline_ = false;
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
  size_t last_line_bytes_ = 0;  // the line ReadHead consumed last, CRLF included
};

}  // namespace kvtier::internal
