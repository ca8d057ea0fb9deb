// Building the policies of one cache by name, with one learner per knob set
// shared by all its `reuse` policies (SharedReuseModels, which the cache
// then feeds). The public CreateAdmissionPolicy, CreateEvictionPolicy and
// AdmissionChain::Create build with `models` null: each `reuse` policy then
// learns on its own from what it observes.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/policy.h"

namespace kvtier::internal {

class SharedReuseModels;

Result<std::unique_ptr<AdmissionPolicy>> BuildAdmission(std::string_view name,
                                                        const PolicyKnobs& knobs, uint64_t seed,
                                                        SharedReuseModels* models);
Result<AdmissionChain> BuildAdmissionChain(std::span<const std::string> names,
                                           const PolicyKnobs& knobs, uint64_t seed,
                                           SharedReuseModels* models);
Result<std::unique_ptr<EvictionPolicy>> BuildEviction(std::string_view name,
                                                      const PolicyKnobs& knobs,
                                                      SharedReuseModels* models);

}  // namespace kvtier::internal
