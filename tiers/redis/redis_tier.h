// The Redis tier: blocks stored one key each ("<prefix>:<namespace hex>:<key
// hex>", value = 64-byte BlockHeader + payload) on one server, several
// independent servers (rendezvous hashing) or a Redis Cluster, through
// pipelined connections owned by I/O threads (see redis_node.h).
//
// Capacity: the tier counts the payload bytes it has written and not removed
// against capacity_bytes and answers ResourceExhausted when a new key would
// not fit. The count is this process's view: keys that expire by TTL, are
// evicted by the server or are written by other processes are not seen, so
// Usage() is approximate when the server is shared.
#pragma once

#include <memory>

#include "kvtier/tier.h"

namespace kvtier::internal {

// InvalidArgument for bad options or refused credentials; Unavailable when no
// server answers at open.
Result<std::unique_ptr<Tier>> NewRedisTier(const TierOptions& options, const TierContext& context);

}  // namespace kvtier::internal
