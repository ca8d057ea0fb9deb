// Where a block lives in Redis: its key name, and which server holds that key
// (Redis Cluster hash slots, or rendezvous hashing over independent servers).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "tiers/redis/redis_connection.h"

namespace kvtier::internal {

inline constexpr uint16_t kRedisClusterSlots = 16384;

// "<prefix>:<namespace as 16 hex digits>:<key as 32 hex digits>".
std::string RedisBlockKeyName(std::string_view prefix, NamespaceId ns, const BlockKey& key);

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster
// uses for key slots. RedisCrc16("123456789") == 0x31C3.
uint16_t RedisCrc16(std::string_view data);

// The cluster slot of `key`: CRC16 mod 16384 over the whole key, or, when the
// key holds a '{' followed later by a '}' with at least one byte between
// them, over the bytes between the first '{' and the first '}' after it.
uint16_t RedisHashSlot(std::string_view key);

// Index of the server with the highest rendezvous score for `key`; the
// servers are named by `server_ids` (e.g. hashes of "host:port"), so adding or
// removing a server moves only the keys it wins or held.
// REQUIRES: !server_ids.empty().
size_t RendezvousPick(std::string_view key, std::span<const uint64_t> server_ids);
uint64_t RendezvousServerId(std::string_view endpoint);

// One range of the CLUSTER SLOTS answer: slots [first, last] served by master.
struct SlotRange {
  uint16_t first = 0;
  uint16_t last = 0;
  RedisEndpoint master;
};

// Bounds on reading a CLUSTER SLOTS reply. It nests 4 arrays deep (reply,
// slot range, node, node metadata). A range is 3 values and ~20 bytes plus,
// per node, ~7 values and ~100 bytes (host, port, 40-byte id, a hostname in
// the metadata). A slot map cut into all 16384 one-slot ranges with one
// replica per master is then ~280K values and ~3.7 MiB; a large cluster with
// 3 replicas per master in a few thousand ranges is far less. Parsed, a reply
// at the limits holds under 50 MiB.
inline constexpr RespLimits kClusterSlotsReplyLimits{.max_depth = 4,
                                                     .max_items = 512 * 1024,
                                                     .max_bulk_bytes = 64 * 1024,
                                                     .max_total_bytes = 8u << 20};

// Parses a CLUSTER SLOTS reply. A master given with an empty or null host
// (Redis answers so when it does not know, or is told not to publish, its
// address) takes `fallback_host`, the host of the node that answered.
// Corruption when the reply has an unexpected shape.
Result<std::vector<SlotRange>> ParseClusterSlots(const RespValue& reply,
                                                 std::string_view fallback_host);

// Bounds on reading a CLUSTER NODES reply: one bulk string of a line per
// node (~100 bytes, plus its slot ranges: at most ~16384 one-slot ranges in
// all, ~6 bytes each).
inline constexpr RespLimits kClusterNodesReplyLimits{
    .max_depth = 1, .max_items = 1, .max_bulk_bytes = 4u << 20, .max_total_bytes = 4u << 20};

// Parses a CLUSTER NODES reply (a line per node: id, ip:port@cport with an
// optional ",hostname", flags, ...) into the endpoints of its masters that
// are members in good standing: flags "master" and none of "fail",
// "handshake", "noaddr". A master with a hostname gives a second endpoint,
// the hostname with the same port; an empty ip takes `fallback_host`, the
// host of the node that answered. Unlike CLUSTER SLOTS it names masters
// that serve no slot yet, such as the target of a migration to a new node.
// Corruption when a line has fewer than 8 fields or a malformed address.
Result<std::vector<RedisEndpoint>> ParseClusterNodesMasters(std::string_view text,
                                                            std::string_view fallback_host);

// Parses the target of a "MOVED <slot> <host>:<port>" or "ASK ..." error; a
// target of ":<port>" leaves the host empty (the answering node's host).
// Returns false when `error` is neither; sets *asking for ASK.
bool ParseRedirect(std::string_view error, RedisEndpoint* target, bool* asking);

// The "normal" class of a CONFIG GET client-output-buffer-limit value
// ("normal 0 0 0 replica ... pubsub ..."), in bytes; 0 where unset or
// malformed (Redis itself answers in bytes, whatever units set it).
struct OutputBufferLimit {
  uint64_t hard_bytes = 0;
  uint64_t soft_bytes = 0;
};
OutputBufferLimit ParseNormalOutputBufferLimit(std::string_view text);

}  // namespace kvtier::internal
