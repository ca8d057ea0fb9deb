// The stores lower tiers write their blocks in ("the nvme file /data/kv",
// "redis 10.0.0.1:6379 db 0 under prefix 'kvtier'", "kvtier-memd host:port"),
// so that two tiers of one runtime never name the same one: each would
// remove the other's blocks (its evictions delete what the other's copy,
// still in the index, holds).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/options.h"

namespace kvtier::internal {

// One entry per store `t` writes; none for a host tier.
std::vector<std::string> TierStores(const TierOptions& t);

// A store two tiers name: which, and the tier that named it first.
struct StoreClash {
  std::string store;
  std::string other_tier;
  bool nvme_index = false;  // the store is an nvme index (index_path), not a file
};

// Records `t`'s stores in `store_of` (store -> tier name); the first of
// them another tier recorded already, if any.
std::optional<StoreClash> FindStoreClash(const TierOptions& t,
                                         std::unordered_map<std::string, std::string>& store_of);

// The message for `clash` of tier `tier`: what, and then what is expected.
std::string StoreClashWhat(const std::string& tier, const StoreClash& clash);
inline constexpr std::string_view kOwnStoreExpected =
    "each tier its own store (one would remove the other's blocks)";

}  // namespace kvtier::internal
