// The mover when memory runs out in its pass: the n-th allocation of one
// pass fails, for each n in turn, while the pass evicts from a lower tier
// (whose copies it then removes). A Remove cut short must stay listed for the
// next pass to retry, not counted as running for good: such a copy would
// stay in the tier, named by nothing, and the key would never be written
// there again.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/core/alloc_failure.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

TEST(MoverAllocFailureTest, RemovesCutShortAreRetriedByTheNextPass) {
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 4);
  o.tiers[0].watermarks = {.high = 0.5, .low = 0.25};
  o.tiers.push_back(LowerHostTier("disk", bb, 64));
  o.tiers.back().watermarks = {.high = 4.0 / 64, .low = 2.0 / 64};  // each pass evicts there
  // The runtime owns the tier; the test asks it directly what it holds.
  Tier* disk = nullptr;
  o.tier_factory = [&disk](const TierOptions& t,
                           const TierContext& c) -> Result<std::unique_ptr<Tier>> {
    auto made = CreateTier(t, c);
    if (made.ok() && t.name == "disk") disk = made->get();
    return made;
  };
  auto opened = Runtime::Open(o, setup.engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Runtime> rt = std::move(opened).value();
  SimEngine sim(rt.get(), setup.engine.get());
  std::vector<BlockKey> keys;
  bool injected = false;
  for (long n = 0; n < 400; ++n) {
    keys.push_back(ChainKeys({1000 + uint64_t(n)})[0]);
    sim.Prefill({keys.back()}, 0);
    ASSERT_TRUE(sim.SaveFrom({keys.back()}, 0, 0).status().ok()) << n;
    FailAllocationAfter(n % 200);
    try {
      (void)rt->TEST_RunMoverOnce();
    } catch (...) {
    }
    injected = DisarmAllocationFailures() || injected;
  }
  ASSERT_TRUE(injected);
  // Memory is back: passes retry what failed. A key the runtime no longer
  // finds has no copy left in the tier.
  for (int pass = 0; pass < 3; ++pass) ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
  size_t orphans = 0;
  for (const BlockKey& k : keys) {
    if (rt->Lookup(kTestNs, std::span(&k, 1))->hit_blocks != 0) continue;
    if (disk->Contains(kTestNs, std::span(&k, 1)).Wait().ok()) ++orphans;
  }
  EXPECT_EQ(orphans, 0u) << "copies whose remove is never retried";
}

}  // namespace
}  // namespace kvtier::testing
