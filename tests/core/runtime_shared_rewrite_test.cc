// A block another process saves again, with other bytes, in a shared tier
// while this runtime's mover is sending the block on to the tier below:
// a load that reads the new bytes in the meantime takes them (and their
// checksum), and the mover judges its own read by the checksum it had when
// it chose the block, never by one a load writes while it reads (under
// TSan, that read was a data race).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {
namespace {

TEST(SharedRewriteTest, ALoadTakingNewBytesWhileTheMoverReadsTheBlockLeavesBothConsistent) {
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  auto made = CreateTier(LowerHostTier("shared", bb, 8), TierContext{bb});
  ASSERT_TRUE(made.ok());
  std::shared_ptr<Tier> inner(std::move(made).value());

  std::unique_ptr<Runtime> rt;
  std::thread loader;
  std::atomic<bool> armed{false};
  std::atomic<bool> loaded{false};  // relaxed on purpose: no ordering for TSan to see
  Status load_status = Status::Internal("not loaded");
  const std::vector<BlockKey> a = ChainKeys({100});
  const std::vector<BlockKey> b = ChainKeys({1, 2, 3, 4});

  RuntimeOptions o = MakeOptions(bb, 8);
  o.tiers[0].watermarks = {.high = 0.1, .low = 0.01};  // a pass demotes every saved block
  o.tiers.push_back(LowerHostTier("shared", bb, 8));
  o.tiers.back().shared = true;
  o.tiers.back().watermarks = {.high = 0.5, .low = 0.01};  // 5 of 8 blocks: all go down
  o.tiers.push_back(LowerHostTier("disk", bb, 32));
  o.tier_factory = [&](const TierOptions& t,
                       const TierContext& c) -> Result<std::unique_ptr<Tier>> {
    if (t.name != "shared") return CreateTier(t, c);
    TierViewHooks hooks;
    // The mover's first read of the shared tier: a load of `a` runs to its
    // end meanwhile, on another thread.
    hooks.before_read = [&] {
      if (!armed.exchange(false)) return;
      loader = std::thread([&] {
        Completion l = SimEngine(rt.get(), setup.engine.get()).Load(a, 20);
        load_status = l.result(0);
        loaded.store(true, std::memory_order_relaxed);
      });
      for (int i = 0; i < 10'000 && !loaded.load(std::memory_order_relaxed); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    };
    return NewTierView(inner, TierCapabilities{.shared = true, .checksummed = true},
                       std::move(hooks));
  };
  auto opened = Runtime::Open(o, setup.engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  rt = std::move(opened).value();
  SimEngine sim(rt.get(), setup.engine.get());

  sim.Prefill(a, 0);
  ASSERT_TRUE(sim.SaveFrom(a, 0, 0).status().ok());
  ASSERT_EQ(*rt->TEST_RunMoverOnce(), 1u);
  ASSERT_EQ(rt->Lookup(kTestNs, a)->tier, (std::vector<uint8_t>{1}));
  // Another process saves `a` again in the shared tier, with other bytes.
  const std::vector<std::byte> theirs = BlockBytes(a[0], bb, /*version=*/7);
  ASSERT_TRUE(
      inner->Write(kTestNs, std::vector<WriteOp>{{a[0], theirs, std::nullopt}}).Wait().ok());

  sim.Prefill(b, 4);
  ASSERT_TRUE(sim.SaveFrom(b, 0, 4).status().ok());
  armed = true;
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
  ASSERT_TRUE(loader.joinable()) << "the mover never read the shared tier";
  loader.join();

  ASSERT_TRUE(load_status.ok()) << load_status.ToString();
  std::vector<std::byte> got(bb);
  ASSERT_TRUE(setup.engine->ReadBlock(20, got).ok());
  EXPECT_EQ(got, theirs) << "the load did not take the shared tier's new bytes";
  EXPECT_EQ(rt->Stats().tiers[1].corruptions, 0u);
  EXPECT_EQ(rt->Stats().tiers[2].corruptions, 0u);
  // Wherever the mover left it, `a` loads as the new bytes and nothing else.
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());  // sends the loaded copy down again
  sim.Scrub(0, 64);
  Completion again = sim.Load(a, 30);
  ASSERT_TRUE(again.result(0).ok()) << again.result(0).ToString();
  ASSERT_TRUE(setup.engine->ReadBlock(30, got).ok());
  EXPECT_EQ(got, theirs);
  rt.reset();
  inner->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
