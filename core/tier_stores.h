// The stores lower tiers write their blocks in ("the nvme file /data/kv",
// "redis 10.0.0.1:6379 db 0 under prefix 'kvtier'", "kvtier-memd host:port"),
// so that two tiers of one runtime never name the same one: each would
// remove the other's blocks (its evictions delete what the other's copy,
// still in the index, holds).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/options.h"

namespace kvtier::internal {

// One entry per store `t` writes; none for a host tier.
std::vector<std::string> TierStores(const TierOptions& t);

// Records `t`'s stores in `store_of` (store -> tier name); InvalidArgument,
// naming both tiers, when another tier recorded one of them already.
Status CheckOwnStore(const TierOptions& t, std::unordered_map<std::string, std::string>& store_of);

}  // namespace kvtier::internal
