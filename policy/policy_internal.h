// Helpers shared by the policy implementations.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kvtier/policy.h"

namespace kvtier::internal {

// splitmix64 finaliser: a cheap, well-mixed 64-bit hash.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// InvalidArgument, saying why, when the knob is out of its range
// (PolicyKnobs::Validate runs them; so do the builders of the policies that
// read them).
Status CheckSketchAgingPeriod(const PolicyKnobs& k);
Status CheckReuseMinSamples(const PolicyKnobs& k);

// `max_nodes`: the most blocks marconi's tree remembers; past it the least
// recently named are forgotten (tests pass a small bound).
Result<std::unique_ptr<AdmissionPolicy>> NewMarconiAdmission(const PolicyKnobs& knobs,
                                                             size_t max_nodes = size_t{1} << 23);
// Reorders the candidates by ascending key_of(candidate), keeping ties in
// their order. Each key is computed once, in candidate order (key_of may
// update the policy's state), not once per comparison.
template <typename KeyOf>
void OrderByKeys(std::span<BlockMeta> c, KeyOf key_of) {
  using Key = decltype(key_of(c[0]));
  std::vector<std::pair<Key, size_t>> keys;
  keys.reserve(c.size());
  for (size_t i = 0; i < c.size(); ++i) keys.emplace_back(key_of(c[i]), i);
  std::sort(keys.begin(), keys.end());  // the index breaks ties: stable
  std::vector<BlockMeta> sorted;
  sorted.reserve(c.size());
  for (const auto& k : keys) sorted.push_back(c[k.second]);
  std::copy(sorted.begin(), sorted.end(), c.begin());
}

class ReuseModel;
// `shared` (may be null): a learner its owner feeds (SharedReuseModels);
// null gives the policy its own, fed by what the policy observes.
Result<std::unique_ptr<AdmissionPolicy>> NewReuseAdmission(const PolicyKnobs& knobs,
                                                           std::shared_ptr<ReuseModel> shared);
Result<std::unique_ptr<EvictionPolicy>> NewReuseEviction(const PolicyKnobs& knobs,
                                                         std::shared_ptr<ReuseModel> shared);

}  // namespace kvtier::internal
