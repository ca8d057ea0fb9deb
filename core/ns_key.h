// (namespace, block key) pairs: the identity of a stored block inside one
// process. Keys already fold the namespace in, but indexes keep both so a
// mismatched namespace can never alias.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/block_key.h"

namespace kvtier::internal {

struct NsKey {
  NamespaceId ns;
  BlockKey key;
  friend bool operator==(const NsKey&, const NsKey&) = default;
};

struct NsKeyHash {
  size_t operator()(const NsKey& k) const noexcept {
    return BlockKeyHash{}(k.key) ^ static_cast<size_t>(k.ns.value * 0xC2B2AE3D27D4EB4FULL);
  }
};

}  // namespace kvtier::internal
