// The conformance suite every tier passes. A backend's test file builds its
// tiers through a TierMaker and instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Host, TierConformanceTest,
//                            ::testing::Values(TierMaker{"host", MakeHost}),
//                            TierMakerName);
//
// and adds tests/support/tier_conformance.cc to its sources.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "kvtier/tier.h"

namespace kvtier::testing {

struct TierMaker {
  std::string name;
  // A fresh, empty tier that holds exactly `capacity_blocks` blocks of
  // `block_bytes` each.
  std::function<Result<std::unique_ptr<Tier>>(uint64_t capacity_blocks, uint64_t block_bytes)>
      make;
};

inline std::string TierMakerName(const ::testing::TestParamInfo<TierMaker>& info) {
  return info.param.name;
}

class TierConformanceTest : public ::testing::TestWithParam<TierMaker> {
 protected:
  static constexpr uint64_t kBlockBytes = 64 * 1024;
  std::unique_ptr<Tier> Make(uint64_t capacity_blocks);
};

}  // namespace kvtier::testing
