// Which kvtier-memd server holds a block: rendezvous (highest random weight)
// hashing over the configured servers. Adding or removing a server moves
// only the keys that server wins or held. Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "kvtier/block_key.h"

namespace kvtier::internal::memd {

// A stable id of a server from its "host:port" text.
uint64_t ServerId(std::string_view endpoint);

// Index of the server with the highest score for (ns, key).
// REQUIRES: !server_ids.empty().
size_t PickServer(NamespaceId ns, const BlockKey& key, std::span<const uint64_t> server_ids);

}  // namespace kvtier::internal::memd
