// Adoption of blocks an earlier run left on a persistent tier, with one
// allocation of the first lookup failing, for each in turn: whatever that
// lookup answers, the next one adopts and reports the whole chain. An entry
// indexed without its copy used to stop every later lookup at that key,
// which adoption then never asked about again.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/core/alloc_failure.h"
#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {
namespace {

TEST(AdoptAllocFailureTest, ALookupCutShortLeavesTheChainToTheNext) {
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  auto made = CreateTier(LowerHostTier("disk", bb, 32), TierContext{bb});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::shared_ptr<Tier> disk(std::move(made).value());
  const std::vector<BlockKey> keys = ChainKeys({1, 2, 3});
  for (const BlockKey& key : keys) {
    std::vector<std::byte> bytes = BlockBytes(key, bb);
    WriteOp w{key, bytes};
    ASSERT_TRUE(disk->Write(kTestNs, std::span(&w, 1)).Wait().ok());
  }
  long n = 0;
  for (bool injected = true; injected && n < 2000; ++n) {
    RuntimeOptions o = MakeOptions(bb, 8);
    o.tiers.push_back(LowerHostTier("disk", bb, 32));
    o.tier_factory = [disk](const TierOptions&,
                            const TierContext&) -> Result<std::unique_ptr<Tier>> {
      return NewTierView(disk, TierCapabilities{.persistent = true, .local_index = true});
    };
    auto opened = Runtime::Open(o, setup.engine);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    std::unique_ptr<Runtime> rt = std::move(opened).value();
    FailAllocationAfter(n);
    try {
      (void)rt->Lookup(kTestNs, keys);
    } catch (...) {
      ADD_FAILURE() << "an exception reached the caller at allocation " << n;
    }
    injected = DisarmAllocationFailures();
    auto again = rt->Lookup(kTestNs, keys);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    ASSERT_EQ(again->hit_blocks, 3u) << "allocation " << n << " failing";
  }
  EXPECT_GT(n, 10);
  disk->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
