// The `policy:` map a tier may carry (policy_keys.cc): knobs of the tier's
// admission and eviction policies.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "config/config_tree.h"
#include "kvtier/options.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// The keys a `policy:` map accepts.
std::span<const std::string_view> PolicyKeys();

// Reads the `policy:` map of the tier map `tier` (at dotted `tier_path`), if
// any, into t->policy, t->read_bytes_per_s and t->read_latency_s. Every error
// is InvalidArgument located at the offending node.
Status ReadPolicyKeys(const ConfigNode& tier, const std::string& tier_path, TierOptions* t);

}  // namespace kvtier::internal
