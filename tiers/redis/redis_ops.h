// The commands of the Redis data path and how their replies are read: one
// SET/GET/EXISTS/DEL per block, written into a connection's pipeline and
// answered in order. A GET reply is read header first, then its payload
// straight into the caller's buffer, and checked before it counts as a hit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvtier/block_header.h"
#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "tiers/redis/redis_connection.h"

namespace kvtier::internal {

struct RedisOp {
  enum class Kind : uint8_t { kSet, kGet, kExists, kDel };
  Kind kind = Kind::kGet;
  bool asking = false;    // send ASKING first (after a cluster ASK redirect)
  uint8_t redirects = 0;  // redirects followed so far
  uint32_t index = 0;     // item of the batch this op answers
  BlockKey block;
  std::string key;                                    // the Redis key
  std::array<std::byte, kBlockHeaderBytes> header{};  // kSet: encoded block header
  std::span<const std::byte> payload;                 // kSet: caller's bytes
  uint64_t account = 0;  // kSet: the tier's record of the key it was accounted under
  std::span<std::byte> dst;                           // kGet: caller's buffer
};

struct RedisOpResult {
  RedisOpResult() = default;
  explicit RedisOpResult(Status s, uint64_t b = 0) : status(std::move(s)), bytes(b) {}

  Status status;
  uint64_t bytes = 0;
  bool redirected = false;  // MOVED or ASK: `target` should answer instead
  bool asking = false;      // the redirect was ASK
  RedisEndpoint target;
  // The server could not be reached (connect failed, or the connection
  // broke or timed out): in a cluster another node may own the key now.
  bool unreachable = false;
};

// Appends `op` to `conn`'s pipeline. `ttl_s` > 0 adds an expiry to SETs and
// makes a GET a GETEX that restarts it (Redis 6.2+); 0 keeps plain GET.
void QueueRedisOp(RedisConnection& conn, const RedisOp& op, uint64_t ttl_s);

// Reads the reply (or replies, with ASKING) of `op`, which was queued in this
// order, within the reply deadline the caller began (BeginReply: one for a
// pipelined chunk, so that replies each just under the timeout cannot hold
// the connection for the timeout times the chunk), which a GET value moves
// on by RedisConnection::ByteBudgetMs of its length once its header has
// vouched for it; past that it is Unavailable and `conn` broken. A transport failure leaves `conn`
// broken and is Unavailable; a reply that is not Redis's leaves it broken and is Corruption. A
// MOVED or ASK reply is `redirected` only when `cluster`; otherwise it is InvalidArgument (a server
// that redirects is a cluster node, or not one to follow).
RedisOpResult ReadRedisOpReply(RedisConnection& conn, const RedisOp& op, NamespaceId ns,
                               bool cluster);

}  // namespace kvtier::internal
