// The host DRAM tier as a Tier: a HostArena plus a key -> slot map. The
// runtime's hub manages its arena through the block index instead; this class
// serves host memory as a lower tier and lets the conformance suite exercise
// the arena.
#pragma once

#include <memory>

#include "kvtier/tier.h"

namespace kvtier::internal {

// InvalidArgument for bad options or a capacity below one block.
Result<std::unique_ptr<Tier>> NewHostTier(const TierOptions& options, const TierContext& context);

}  // namespace kvtier::internal
