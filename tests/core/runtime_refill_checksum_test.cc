// A block whose last copy was lost while a load was reading it, and whose
// save of new bytes then failed: the load's read still comes back, and the
// bytes it brings are checked against the lost copy's checksum. The save
// used to drop that checksum when it began, so a corrupt read went to the
// engine as the block.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "tests/core/gated_copy_engine.h"
#include "tests/core/runtime_test_util.h"
#include "tests/support/fault_tier.h"

namespace kvtier::testing {
namespace {

TEST(RuntimeRefillChecksumTest, AFailedRefillKeepsTheChecksumAReadIsCheckedAgainst) {
  EngineSetup setup = MakeEngine(64);
  auto engine = std::make_shared<GatedCopyEngine>(setup.engine);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 8);
  o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
  o.tiers.push_back(LowerHostTier("below", bb, 32));
  auto stall = std::make_shared<CallStall>();
  std::function<void(NamespaceId, std::span<const BlockKey>)> lost;
  o.tier_factory = [&](const TierOptions& t,
                       const TierContext& c) -> Result<std::unique_ptr<Tier>> {
    auto tier = CreateTier(t, c);
    if (!tier.ok()) return tier.status();
    lost = c.copies_lost;
    // Every read that succeeds comes back with a byte flipped.
    return NewFaultInjectingTier(std::move(tier).value(),
                                 FaultOptions{.corrupt_on_read = true, .stall_reads = stall});
  };
  auto opened = Runtime::Open(o, engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Runtime> rt = std::move(opened).value();
  ASSERT_TRUE(lost);
  SimEngine sim(rt.get(), setup.engine.get());
  const auto chain = ChainKeys({1, 2, 3, 4, 5, 6, 7, 8});
  sim.Prefill(chain, 0);
  ASSERT_TRUE(sim.SaveFrom(chain, 0, 0).status().ok());
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());  // down to the low mark: K3.. below the hub
  const std::vector<BlockKey> keys(chain.begin(), chain.begin() + 4);
  ASSERT_EQ(rt->Lookup(kTestNs, keys)->tier, (std::vector<uint8_t>{0, 0, 1, 1}));

  // A load pins the chain; its read of K4 is held.
  stall->Stall();
  sim.Scrub(16, 4);
  const std::vector<uint32_t> into = {16, 17, 18, 19};
  Completion load = rt->Load(kTestNs, keys, into, std::chrono::seconds(20), {});
  for (int i = 0; i < 500 && stall->held() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(stall->held(), 0u) << "the load never read below the hub";
  // K4's copy is reported lost, and a save of new bytes for it fails.
  lost(kTestNs, std::span(keys).last(1));
  engine->HoldNextGather();
  const std::vector<uint32_t> from = {0, 1, 2, 3};
  Completion save = rt->Save(kTestNs, std::nullopt, keys, from);
  ASSERT_TRUE(engine->WaitHeld());
  engine->Release(/*fail=*/true);
  (void)save.Wait();
  EXPECT_FALSE(save.result(3).ok()) << "the refill of K4 was not tried";
  // The held read comes back corrupt.
  stall->Release();
  ASSERT_TRUE(load.WaitFor(std::chrono::seconds(20)).code() != StatusCode::kDeadlineExceeded ||
              load.Poll());
  EXPECT_EQ(load.result(3).code(), StatusCode::kCorruption) << load.result(3).ToString();
  for (uint32_t i = 0; i < 4; ++i) {
    if (load.result(i).ok()) EXPECT_TRUE(sim.Holds(16 + i, keys[i])) << i << ": wrong bytes";
  }
  rt->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
