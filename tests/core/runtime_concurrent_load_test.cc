// Two loads of one block below the hub: the second reads it and installs it
// in the hub while the first is still reading, and the tier then loses the
// block, so the first read misses. The block is in the hub by then, and the
// first load is answered from there rather than failed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {

TEST(ConcurrentLoadTest, AReadThatMissesABlockAnotherLoadInstalledMeanwhileIsServedFromTheHub) {
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  auto made = CreateTier(LowerHostTier("disk", bb, 8), TierContext{bb});
  ASSERT_TRUE(made.ok());
  std::shared_ptr<Tier> inner(std::move(made).value());
  const std::vector<BlockKey> k = ChainKeys({1});

  std::unique_ptr<Runtime> rt;
  std::atomic<bool> armed{false};
  Status second = Status::Internal("not run");
  TierViewHooks hooks;
  // The first load's read: a second load of the block runs to its end
  // (installing it in the hub), then the tier loses the block.
  hooks.before_read = [&] {
    if (!armed.exchange(false)) return;
    const std::vector<uint32_t> into{20};
    second = rt->Load(kTestNs, k, into, std::chrono::seconds(5)).Wait();
    (void)inner->Remove(kTestNs, k).Wait();
  };
  RuntimeOptions o = MakeOptions(bb, 8);
  o.tiers[0].watermarks = {.high = 0.1, .low = 0.01};  // a pass demotes every saved block
  o.tiers.push_back(LowerHostTier("disk", bb, 8));
  o.tier_factory = [&](const TierOptions& t,
                       const TierContext& c) -> Result<std::unique_ptr<Tier>> {
    if (t.name != "disk") return CreateTier(t, c);
    return NewTierView(inner, TierCapabilities{}, hooks);
  };
  auto opened = Runtime::Open(o, setup.engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  rt = std::move(opened).value();
  SimEngine sim(rt.get(), setup.engine.get());
  sim.Prefill(k, 0);
  ASSERT_TRUE(sim.SaveFrom(k, 0, 0).status().ok());
  ASSERT_EQ(*rt->TEST_RunMoverOnce(), 1u);
  ASSERT_EQ(rt->Lookup(kTestNs, k)->tier, (std::vector<uint8_t>{1}));
  sim.Scrub(0, 64);

  armed = true;
  Completion first = sim.Load(k, 10);
  ASSERT_FALSE(armed) << "the first load never read the tier";
  ASSERT_TRUE(second.ok()) << second.ToString();
  EXPECT_TRUE(sim.Holds(20, k[0]));
  ASSERT_TRUE(first.result(0).ok()) << first.result(0).ToString();
  EXPECT_TRUE(sim.Holds(10, k[0]));
  EXPECT_EQ(rt->Lookup(kTestNs, k)->tier, (std::vector<uint8_t>{0}))
      << "the lost copy is forgotten";
  rt.reset();
  inner->Shutdown();
}

}  // namespace kvtier::testing
