// One capacity point of `kvtier-bench sweep`: its capacities and its rows,
// apart from the CLI wiring (sweep_cli.h) so that tests reach them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/policy.h"
#include "kvtier/status.h"
#include "tools/bench/sweep.h"
#include "tools/bench/sweep_args.h"

namespace kvtier::bench {

// The capacities of `point` (as written in --points) for a trace of `unique`
// blocks. InvalidArgument naming the point, its host share and `unique` when
// the host share is less than one block: the sweep needs a hub.
Result<SweepCapacity> SweepCapacityAt(std::string_view point, uint64_t unique);

// Hears each row as it ends: the policy set's name and the wall seconds it took.
using SweepRowDone = std::function<void(const std::string& name, double seconds)>;

// The rows of one point, one per name in flags.policies and in that order
// ("custom" is flags.custom). With --write-budget-lru-share the lru row runs
// first wherever it is listed, and each row whose admission includes
// write_budget gets the share of lru's NVMe bytes per modeled day as its
// budget. REQUIRES: ValidateSweepFlags(flags) passed. Errors name the row.
Result<std::vector<SweepResult>> RunSweepPoint(const Trace& trace, const SweepEngine& engine,
                                               const SweepFlags& flags,
                                               const SweepCapacity& capacity,
                                               const PolicyKnobs& knobs,
                                               const SweepRowDone& done = {});

}  // namespace kvtier::bench
