#include <gtest/gtest.h>

#include "tests/support/fault_tier.h"
#include "tests/support/tier_conformance.h"

namespace kvtier::testing {
namespace {

TierOptions HostOptions(uint64_t capacity_blocks, uint64_t block_bytes) {
  TierOptions o;
  o.name = "host";
  o.type = "host";
  // Slots are 4 KiB-aligned, so capacity in whole aligned blocks.
  o.capacity_bytes = capacity_blocks * ((block_bytes + 4095) / 4096 * 4096);
  o.mlock = false;
  return o;
}

Result<std::unique_ptr<Tier>> MakeHost(uint64_t capacity_blocks, uint64_t block_bytes) {
  return CreateTier(HostOptions(capacity_blocks, block_bytes), TierContext{block_bytes});
}

// The same tier behind the fault injector with latency only: every batch
// completes on another thread, which exercises the asynchronous paths.
Result<std::unique_ptr<Tier>> MakeSlowHost(uint64_t capacity_blocks, uint64_t block_bytes) {
  auto inner = MakeHost(capacity_blocks, block_bytes);
  if (!inner.ok()) return inner.status();
  FaultOptions f;
  f.latency = std::chrono::microseconds(200);
  return NewFaultInjectingTier(std::move(inner).value(), f);
}

INSTANTIATE_TEST_SUITE_P(Host, TierConformanceTest,
                         ::testing::Values(TierMaker{"Host", MakeHost},
                                           TierMaker{"HostWithLatency", MakeSlowHost}),
                         TierMakerName);

}  // namespace
}  // namespace kvtier::testing
