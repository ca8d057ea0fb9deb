// Turns a ConfigNode tree (file plus overrides) into a KvtierConfig,
// checking the schema documented in config/examples/default.yaml.
#pragma once

#include <string>
#include <string_view>
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

// The dotted name of every key ReadConfig accepts outside `tiers`
// ("model.preset", ..., "mover.batch_blocks"), for tools that list them all.
std::vector<std::string> SectionKeyNames();
// The dotted name, below "<tier>.", of every key a tier of `type` accepts:
// the common keys with "watermarks.high" and "watermarks.low", the type's own
// keys, and each knob as "policy.<knob>".
std::vector<std::string> TierKeyNames(std::string_view type);

}  // namespace kvtier::internal
