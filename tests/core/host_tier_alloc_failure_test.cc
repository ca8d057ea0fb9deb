// The host tier's write with one allocation failing, for each in turn: the
// write fails or lands, and the tier's room adds up either way (its arena's
// used slots are the blocks it holds). A failure after a slot was taken
// used to keep that slot for good.
#include <gtest/gtest.h>

#include <new>
#include <vector>

#include "tests/core/alloc_failure.h"
#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"

namespace kvtier::testing {
namespace {

TEST(HostTierAllocFailureTest, AWriteThatRunsOutOfMemoryGivesItsSlotBack) {
  constexpr uint64_t kBlock = 4096;
  auto made = CreateTier(LowerHostTier("host", kBlock, 8), TierContext{kBlock});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Tier& tier = **made;
  long n = 0;
  for (bool injected = true; injected && n < 200; ++n) {
    const BlockKey key = TestKey(static_cast<uint64_t>(n));
    std::vector<std::byte> bytes = BlockBytes(key, kBlock);
    WriteOp w{key, bytes};
    FailAllocationAfter(n);
    try {  // building the call's completion may throw; what the tier did counts
      Completion c = tier.Write(kTestNs, std::span(&w, 1));
      injected = DisarmAllocationFailures();
      (void)c.Wait();
    } catch (const std::bad_alloc&) {
      injected = DisarmAllocationFailures();
    }
    const TierUsage u = tier.Usage();
    ASSERT_EQ(u.used_bytes, u.blocks * kBlock) << "allocation " << n << " failing";
    // Room for the next: the blocks written so far go.
    Completion gone = tier.Remove(kTestNs, std::vector<BlockKey>{key});
    (void)gone.Wait();
    ASSERT_EQ(tier.Usage().used_bytes, 0u) << "allocation " << n << " failing";
  }
  EXPECT_GT(n, 2);
  tier.Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
