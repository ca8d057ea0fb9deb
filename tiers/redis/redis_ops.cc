#include "tiers/redis/redis_ops.h"

#include <string_view>
#include <vector>

#include "tiers/redis/redis_routing.h"

namespace kvtier::internal {
namespace {

std::string_view CommandName(RedisOp::Kind kind) {
  switch (kind) {
    case RedisOp::Kind::kSet:
      return "SET";
    case RedisOp::Kind::kGet:
      return "GET";
    case RedisOp::Kind::kExists:
      return "EXISTS";
    case RedisOp::Kind::kDel:
      return "DEL";
  }
  return "?";
}

std::string Describe(const RedisConnection& conn, const RedisOp& op) {
  return std::string(CommandName(op.kind)) + " " + op.key + " on redis " +
         conn.endpoint().ToString();
}

RedisOpResult Failed(Status st) { return RedisOpResult{std::move(st)}; }

// Values past this are not drained but cut off with their connection: a
// server announcing gigabytes could otherwise keep the op reading (each read
// within its timeout) long past the op's deadline.
constexpr uint64_t kMaxDrainBytes = uint64_t{4} << 20;

// Drains the rest of a value that will not be handed over, then reports `st`.
RedisOpResult Reject(RedisConnection& conn, uint64_t left, Status st) {
  if (left > kMaxDrainBytes) {
    conn.Abandon();
    return Failed(std::move(st));
  }
  conn.ExtendReply(left);  // a bounded drain
  Status drained = conn.SkipBody(left);
  if (drained.ok()) drained = conn.EndBody();
  return Failed(drained.ok() ? std::move(st) : std::move(drained));
}

// A GET hit of `length` bytes: header, length and checksum are checked before
// the payload counts; any mismatch is Corruption. The reply's deadline moves
// on for the payload only once the header has vouched for it: the length a
// server announces buys it no time (a header trickled in under an announced
// 4 GB used to hold the op for minutes).
RedisOpResult ReadBlockValue(RedisConnection& conn, const RedisOp& op, NamespaceId ns,
                             uint64_t length) {
  const std::string what = Describe(conn, op);
  if (length < kBlockHeaderBytes) {
    return Reject(conn, length,
                  Status::Corruption(what + ": value of " + std::to_string(length) +
                                     " bytes is shorter than a block header"));
  }
  std::array<std::byte, kBlockHeaderBytes> raw;
  Status st = conn.ReadBody(raw);
  if (!st.ok()) return Failed(std::move(st));
  const uint64_t payload = length - kBlockHeaderBytes;
  auto header = DecodeBlockHeader(raw);
  if (!header.ok()) {
    return Reject(conn, payload,
                  Status::Corruption(what + ": " + std::string(header.status().message())));
  }
  if (header->payload_bytes != payload) {
    return Reject(
        conn, payload,
        Status::Corruption(what + ": header says " + std::to_string(header->payload_bytes) +
                           " payload bytes, the value holds " + std::to_string(payload)));
  }
  // Another block's value (written over ours by another client) is
  // Corruption whatever its size, so the runtime forgets the copy; only a
  // value of this block too large for the buffer is the caller's error.
  if (st = VerifyBlockOwner(*header, ns, op.block); !st.ok()) {
    return Reject(conn, payload, Status::Corruption(what + ": " + std::string(st.message())));
  }
  if (payload > op.dst.size()) {
    return Reject(conn, payload,
                  Status::InvalidArgument("read buffer of " + std::to_string(op.dst.size()) +
                                          " bytes < block of " + std::to_string(payload)));
  }
  std::span<std::byte> out = op.dst.first(payload);
  conn.ExtendReply(payload);
  st = conn.ReadBody(out);
  if (st.ok()) st = conn.EndBody();
  if (!st.ok()) return Failed(std::move(st));
  st = VerifyBlock(*header, ns, op.block, out);
  if (!st.ok()) return Failed(Status::Corruption(what + ": " + std::string(st.message())));
  return RedisOpResult{Status::Ok(), payload};
}

RedisOpResult Unexpected(RedisConnection& conn, const RedisOp& op, const RespHead& head) {
  // The stream can no longer be trusted to be in step with the pipeline.
  conn.Abandon();
  return Failed(Status::Corruption(Describe(conn, op) + ": unexpected reply type"));
}

}  // namespace

RedisOpResult ReadRedisOpReply(RedisConnection& conn, const RedisOp& op, NamespaceId ns,
                               bool cluster) {
  if (op.asking) {
    auto ok = conn.ReadSimple();
    if (!ok.ok()) return Failed(ok.status());
  }
  auto head = conn.ReadHead();
  if (!head.ok()) return Failed(head.status());
  if (head->kind == RespHead::Kind::kError) {
    RedisOpResult r;
    if (ParseRedirect(head->text, &r.target, &r.asking)) {
      if (r.target.host.empty()) r.target.host = conn.endpoint().host;
      if (!cluster) {
        return Failed(Status::InvalidArgument(
            Describe(conn, op) + ": server answered '" + head->text +
            "', a cluster redirect, which is not followed without cluster: true"));
      }
      r.redirected = true;
      r.status = Status::Unavailable(Describe(conn, op) + ": redirected: " + head->text);
      return r;
    }
    return Failed(FromRedisError(head->text, Describe(conn, op)));
  }
  switch (op.kind) {
    case RedisOp::Kind::kSet:
      if (head->kind == RespHead::Kind::kStatus)
        return RedisOpResult{Status::Ok(), op.payload.size()};
      break;
    case RedisOp::Kind::kGet:
      if (head->kind == RespHead::Kind::kNil) {
        return Failed(Status::NotFound("not in redis " + conn.endpoint().ToString()));
      }
      if (head->kind == RespHead::Kind::kBulk) {
        return ReadBlockValue(conn, op, ns, static_cast<uint64_t>(head->integer));
      }
      break;
    case RedisOp::Kind::kExists:
      if (head->kind == RespHead::Kind::kInteger) {
        return head->integer > 0
                   ? RedisOpResult{Status::Ok()}
                   : Failed(Status::NotFound("not in redis " + conn.endpoint().ToString()));
      }
      break;
    case RedisOp::Kind::kDel:
      if (head->kind == RespHead::Kind::kInteger) return RedisOpResult{Status::Ok()};
      break;
  }
  return Unexpected(conn, op, *head);
}

void QueueRedisOp(RedisConnection& conn, const RedisOp& op, uint64_t ttl_s) {
  if (op.asking) {
    std::string_view asking[] = {"ASKING"};
    conn.Queue(asking);
  }
  std::string_view argv[] = {CommandName(op.kind), op.key};
  if (op.kind == RedisOp::Kind::kGet && ttl_s > 0) {
    const std::string ttl = std::to_string(ttl_s);
    // GETEX (Redis 6.2+) restarts the expiry on every hit, so a block's TTL
    // counts from its last use, not its write: a block read all the time
    // stays while one never read goes. Its reply is GET's (bulk or nil);
    // being a write command it goes to the master that owns the key's slot,
    // which is where the tier sends every op anyway.
    std::string_view getex[] = {"GETEX", op.key, "EX", ttl};
    conn.Queue(getex);
    return;
  }
  if (op.kind != RedisOp::Kind::kSet) {
    conn.Queue(argv);
    return;
  }
  std::span<const std::byte> parts[] = {op.header, op.payload};
  if (ttl_s == 0) {
    conn.QueueWithValue(argv, parts, {});
    return;
  }
  const std::string ttl = std::to_string(ttl_s);
  std::string_view trailing[] = {"EX", ttl};
  conn.QueueWithValue(argv, parts, trailing);
}

}  // namespace kvtier::internal
