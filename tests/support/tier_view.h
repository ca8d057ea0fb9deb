// TierView: a non-owning Tier that forwards to another tier, with its own
// capabilities. Lets a test hand the same backing tier to two runtimes in
// turn (a "restart") and declare it persistent with a local index.
#pragma once

#include <functional>
#include <memory>

#include "kvtier/tier.h"

namespace kvtier::testing {

// `inner` must outlive the view; shutting the view down leaves `inner` open.
// `after_contains`, when set, runs once `inner` has answered a Contains and
// before the view answers it: a test's way to act inside that window.
std::unique_ptr<Tier> NewTierView(std::shared_ptr<Tier> inner, TierCapabilities caps,
                                  std::function<void()> after_contains = {});

}  // namespace kvtier::testing
