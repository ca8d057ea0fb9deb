// Helpers shared by the policy implementations.
#pragma once

#include <cstdint>
#include <memory>

#include "kvtier/policy.h"

namespace kvtier::internal {

// splitmix64 finaliser: a cheap, well-mixed 64-bit hash.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Result<std::unique_ptr<AdmissionPolicy>> NewMarconiAdmission(const PolicyKnobs& knobs);
class ReuseModel;
// `shared` (may be null): a learner its owner feeds (SharedReuseModels);
// null gives the policy its own, fed by what the policy observes.
Result<std::unique_ptr<AdmissionPolicy>> NewReuseAdmission(const PolicyKnobs& knobs,
                                                           std::shared_ptr<ReuseModel> shared);
Result<std::unique_ptr<EvictionPolicy>> NewReuseEviction(const PolicyKnobs& knobs,
                                                         std::shared_ptr<ReuseModel> shared);

}  // namespace kvtier::internal
