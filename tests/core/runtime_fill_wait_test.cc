// A load that needs hub room while saves hold every slot being filled: it
// waits for those fills (as it waits for pins), at most kHubRoomWait, and
// then takes the blocks they stored, instead of failing at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "core/runtime_impl.h"
#include "tests/core/gated_copy_engine.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kHub = 4;

TEST(RuntimeFillWaitTest, ALoadWaitsForSavesFillingTheHubAndThenStagesItsBlocks) {
  EngineSetup setup = MakeEngine(64);
  auto engine = std::make_shared<GatedCopyEngine>(setup.engine);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, kHub);
  o.tiers.push_back(LowerHostTier("lower", bb, 16));
  auto opened = Runtime::Open(o, engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Runtime> rt = std::move(opened).value();
  SimEngine sim(rt.get(), setup.engine.get());
  const std::vector<BlockKey> a = ChainKeys({1, 2, 3, 4});
  const std::vector<BlockKey> b = ChainKeys({11, 12, 13, 14});
  sim.Prefill(a, 0);
  sim.Prefill(b, kHub);
  ASSERT_TRUE(sim.SaveFrom(a, 0, 0).status().ok());
  // b's save demotes a to the lower tier and holds every hub slot while
  // its copy from the engine is held.
  engine->HoldNextGather();
  const std::vector<uint32_t> b_blocks = {kHub, kHub + 1, kHub + 2, kHub + 3};
  Completion save = rt->Save(kTestNs, std::nullopt, b, b_blocks);
  ASSERT_TRUE(engine->WaitHeld());
  ASSERT_EQ(rt->Lookup(kTestNs, a)->tier, std::vector<uint8_t>(kHub, 1));
  // The load finds nothing to evict (every slot is being filled); the copy
  // ends only then, so a load that did not wait would have failed.
  std::atomic<bool> released{false};
  static_cast<internal::RuntimeImpl*>(rt.get())->TEST_SetAfterHubRoomTry([&] {
    if (!released.exchange(true)) engine->Release(/*fail=*/false);
  });
  sim.Scrub(2 * kHub, kHub);
  Completion load = sim.Load(a, 2 * kHub);
  EXPECT_TRUE(released.load()) << "the load found room without waiting: the test proves nothing";
  ASSERT_TRUE(load.status().ok()) << load.status().ToString();
  for (uint32_t i = 0; i < kHub; ++i) EXPECT_TRUE(sim.Holds(2 * kHub + i, a[i]));
  EXPECT_TRUE(save.Wait().ok()) << save.status().ToString();
  engine->Release(/*fail=*/true);  // nothing held by now; a no-op
  rt.reset();
}

}  // namespace
}  // namespace kvtier::testing
