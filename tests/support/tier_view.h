// TierView: a non-owning Tier that forwards to another tier, with its own
// capabilities. Lets a test hand the same backing tier to two runtimes in
// turn (a "restart") and declare it persistent with a local index.
#pragma once

#include <memory>

#include "kvtier/tier.h"

namespace kvtier::testing {

// `inner` must outlive the view; shutting the view down leaves `inner` open.
std::unique_ptr<Tier> NewTierView(std::shared_ptr<Tier> inner, TierCapabilities caps);

}  // namespace kvtier::testing
