// Turns a ConfigNode tree (file plus overrides) into a KvtierConfig,
// checking the schema documented in config/examples/default.yaml.
#pragma once

#include <vector>

#include "config/config_tree.h"
#include "kvtier/config.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// REQUIRES: `root` is not empty. Fills `out` except `out->source`. Every error
// is InvalidArgument located at the offending node.
Status ReadConfig(const ConfigNode& root, KvtierConfig* out);

// The `tiers` list of `root` (tier_reader.cc). Requires at least one tier,
// the first of type host, unique names.
Status ReadTiers(const ConfigNode& root, std::vector<TierOptions>* tiers);

}  // namespace kvtier::internal
