// TierView: a non-owning Tier that forwards to another tier, with its own
// capabilities. Lets a test hand the same backing tier to two runtimes in
// turn (a "restart") and declare it persistent with a local index.
#pragma once

#include <functional>
#include <memory>

#include "kvtier/tier.h"

namespace kvtier::testing {

// A test's way to act inside a call, each run on the caller's thread when set.
struct TierViewHooks {
  // Once `inner` has answered a Contains, before the view answers it.
  std::function<void()> after_contains;
  // Before a Read is passed to `inner` (it may throw, as a broken tier would).
  std::function<void()> before_read;
  // Before Usage() asks `inner` (it may throw, as a broken tier would).
  std::function<void()> before_usage;
  // Before a Contains of `keys` keys is passed to `inner`: returning true,
  // it has taken `done` instead (answered it, or kept it to answer later,
  // before the view is shut down) and `inner` is not asked.
  std::function<bool(size_t keys, CompletionSource& done)> instead_of_contains;
  // Before a Write is passed to `inner` (a slow device: it may sleep); an
  // error fails every op of the write with it instead, and `inner` is not asked.
  std::function<Status()> before_write;
  // Then per op of that Write: an error fails that op with it, and only the
  // ops it answers OK for are passed to `inner`.
  std::function<Status(const BlockKey&)> write_op_status;
  // Before a Remove is passed to `inner` (a slow device: it may block).
  std::function<void()> before_remove;
  // Before a Claim is passed to `inner`.
  std::function<void()> before_claim;
};

// `inner` must outlive the view; shutting the view down leaves `inner` open.
std::unique_ptr<Tier> NewTierView(std::shared_ptr<Tier> inner, TierCapabilities caps,
                                  TierViewHooks hooks = {});

}  // namespace kvtier::testing
