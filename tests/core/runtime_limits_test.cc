// Limits at the edges of the API: calls larger than a tier accepts in one
// batch, a load with no deadline, calls refused before they have any item,
// a tier factory that returns nothing, and tiers or copy engines that throw.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "tests/core/disk_view_fixture.h"
#include "tests/core/runtime_test_util.h"
#include "tests/support/fault_tier.h"

namespace kvtier::testing {
namespace {

// A lower tier that takes at most two blocks per call, so the six-block
// chains below need three calls for every read, write, remove and contains.
class RuntimeBatchLimitTest : public DiskViewTest {
 protected:
  std::unique_ptr<Runtime> Open(TierViewHooks hooks = {}) {
    return OpenOver(
        8, {.high = 0.5, .low = 0.125},
        TierCapabilities{.persistent = true, .local_index = true, .max_batch_blocks = 2}, hooks);
  }
};

TEST_F(RuntimeBatchLimitTest, EveryTierCallIsSplitToWhatTheTierAccepts) {
  const auto keys = ChainKeys({1, 2, 3, 4, 5, 6});
  std::unique_ptr<Runtime> rt = Open();
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  // Down to 1 of 8 in the hub, leaves first: five blocks written below.
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
  EXPECT_EQ(disk_->Usage().blocks, 5u);
  auto found = rt->Lookup(kTestNs, keys);
  ASSERT_EQ(found->hit_blocks, 6u);
  EXPECT_EQ(found->tier, (std::vector<uint8_t>{0, 1, 1, 1, 1, 1}));
  sim.Scrub(0, 64);
  Completion c = sim.Load(keys, 10);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim.Holds(10 + i, keys[i])) << i;

  // The hub's copies go with the runtime; a restarted one adopts the five
  // blocks below once the root is saved again.
  rt.reset();
  rt = Open();
  ASSERT_NE(rt, nullptr);
  SimEngine again(rt.get(), setup_.engine.get());
  const std::vector<BlockKey> root(keys.begin(), keys.begin() + 1);
  again.Prefill(root, 0);
  ASSERT_TRUE(again.SaveFrom(root, 0, 0).status().ok());
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 6u);
  EXPECT_EQ(rt->Stats().adopted_blocks, 5u);

  ASSERT_TRUE(rt->Remove(kTestNs, keys).ok());
  EXPECT_EQ(disk_->Usage().blocks, 0u);
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 0u);
}

// A lower tier whose Read throws (a broken backend): the load still gets an
// answer for every block, at once, and lets go of its pins and hub slots, so
// the blocks can be removed and the runtime goes on serving.
TEST_F(RuntimeBatchLimitTest, ATierThatThrowsFailsItsBlocksAndHoldsNothing) {
  bool broken = false;
  std::unique_ptr<Runtime> rt = Open(TierViewHooks{.before_read = [&broken] {
    if (broken) throw std::runtime_error("backend bug");
  }});
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  const auto keys = ChainKeys({1, 2, 3, 4, 5, 6});
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
  broken = true;
  sim.Scrub(0, 64);
  Completion c = sim.Load(keys, 10, std::chrono::seconds(5));
  ASSERT_TRUE(c.Poll());
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  for (size_t i = 1; i < keys.size(); ++i)
    EXPECT_EQ(c.result(i).code(), StatusCode::kCancelled) << i << ": " << c.result(i).ToString();
  EXPECT_TRUE(rt->Remove(kTestNs, keys).ok()) << "the failed load left blocks pinned";
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 0u);
}

// A lower tier whose Usage() throws while a load makes room in the hub (by
// writing hub blocks down to it), and while the mover runs: the load ends
// Internal and the pass reports Internal (the mover thread would have ended
// the process), and neither keeps a pin or a block marked as moving, so
// every block can still be loaded, demoted and removed afterwards.
TEST_F(RuntimeBatchLimitTest, ATierWhoseUsageThrowsLeavesNothingHeld) {
  std::atomic<bool> broken{false};
  std::unique_ptr<Runtime> rt = Open(TierViewHooks{.before_usage = [&broken] {
    if (broken) throw std::runtime_error("usage bug");
  }});
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  const auto keys = ChainKeys({1, 2, 3, 4, 5, 6});
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());  // K1 in the hub, K2..K6 below
  const auto fill = ChainKeys({7, 8, 9, 10, 11, 12, 13});
  sim.Prefill(fill, 20);
  ASSERT_TRUE(sim.SaveFrom(fill, 0, 20).status().ok());  // the hub is full
  broken = true;
  Completion c = sim.Load(keys, 40, std::chrono::seconds(5));
  ASSERT_TRUE(c.Poll());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kInternal) << i << ": " << c.result(i).ToString();
  }
  Result<size_t> pass = rt->TEST_RunMoverOnce();
  EXPECT_EQ(pass.status().code(), StatusCode::kInternal) << pass.status().ToString();
  EXPECT_NE(pass.status().message().find("usage bug"), std::string_view::npos);

  broken = false;
  sim.Scrub(0, 64);
  ASSERT_TRUE(sim.Load(keys, 40, std::chrono::seconds(5)).status().ok());
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim.Holds(40 + i, keys[i])) << i;
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
  EXPECT_TRUE(rt->Remove(kTestNs, keys).ok()) << "the failed load left blocks pinned";
  EXPECT_TRUE(rt->Remove(kTestNs, fill).ok()) << "the failed pass left blocks moving";
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 0u);
  EXPECT_EQ(rt->Lookup(kTestNs, fill)->hit_blocks, 0u);
}

// A copy engine over the host one whose next Gather or Scatter throws
// before copying anything, as an engine with a bug might.
class ThrowingCopyEngine final : public CopyEngine {
 public:
  explicit ThrowingCopyEngine(std::shared_ptr<HostCopyEngine> inner) : inner_(std::move(inner)) {}
  const KvLayout& layout() const override { return inner_->layout(); }
  void Gather(std::span<const BlockCopy> copies, CopyDone done) override {
    if (throw_gather.exchange(false)) throw std::runtime_error("gather bug");
    inner_->Gather(copies, std::move(done));
  }
  void Scatter(std::span<const BlockCopy> copies, LayerDone on_layer, CopyDone done) override {
    if (throw_scatter.exchange(false)) throw std::runtime_error("scatter bug");
    inner_->Scatter(copies, std::move(on_layer), std::move(done));
  }
  std::atomic<bool> throw_gather{false};
  std::atomic<bool> throw_scatter{false};

 private:
  std::shared_ptr<HostCopyEngine> inner_;
};

// A throwing Gather fails every block of the save and leaves nothing
// reserved: no hub slot in use and no entry being filled, so a retry stores
// the blocks rather than taking them for another call's.
TEST(RuntimeLimits, AnEngineThatThrowsOnGatherFailsTheSaveAndHoldsNothing) {
  EngineSetup setup = MakeEngine(64);
  auto engine = std::make_shared<ThrowingCopyEngine>(setup.engine);
  auto rt = Runtime::Open(MakeOptions(setup.layout.BlockBytes(), 8), engine);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  SimEngine sim(rt->get(), setup.engine.get());
  const auto keys = ChainKeys({1, 2, 3, 4});
  sim.Prefill(keys, 0);
  engine->throw_gather = true;
  Completion c = sim.SaveFrom(keys, 0, 0);
  ASSERT_TRUE(c.Poll());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kInternal) << i << ": " << c.result(i).ToString();
    EXPECT_NE(c.result(i).message().find("gather bug"), std::string::npos) << i;
  }
  const RuntimeStats failed = (*rt)->Stats();
  EXPECT_EQ(failed.tiers[0].used_bytes, 0u);
  // Counted as the failures the engine was told of.
  EXPECT_EQ(failed.save_failures, keys.size());
  ASSERT_EQ(failed.errors.size(), 1u);
  EXPECT_EQ(failed.errors[0].code, StatusCode::kInternal);
  EXPECT_EQ(failed.errors[0].blocks, keys.size());
  EXPECT_EQ((*rt)->Lookup(kTestNs, keys)->hit_blocks, 0u);

  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  EXPECT_EQ((*rt)->Lookup(kTestNs, keys)->hit_blocks, keys.size());
  sim.Scrub(0, 64);
  ASSERT_TRUE(sim.Load(keys, 10).status().ok());
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim.Holds(10 + i, keys[i])) << i;
}

// A throwing Scatter fails every block of the load and lets go of its pins:
// the blocks load again afterwards and can be removed.
TEST(RuntimeLimits, AnEngineThatThrowsOnScatterFailsTheLoadAndHoldsNothing) {
  EngineSetup setup = MakeEngine(64);
  auto engine = std::make_shared<ThrowingCopyEngine>(setup.engine);
  auto rt = Runtime::Open(MakeOptions(setup.layout.BlockBytes(), 8), engine);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  SimEngine sim(rt->get(), setup.engine.get());
  const auto keys = ChainKeys({1, 2, 3, 4});
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  engine->throw_scatter = true;
  Completion c = sim.Load(keys, 10, std::chrono::seconds(5));
  ASSERT_TRUE(c.Poll());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kInternal) << i << ": " << c.result(i).ToString();
    EXPECT_NE(c.result(i).message().find("scatter bug"), std::string::npos) << i;
  }
  EXPECT_EQ((*rt)->Stats().load_failures, keys.size());
  sim.Scrub(0, 64);
  ASSERT_TRUE(sim.Load(keys, 10).status().ok());
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim.Holds(10 + i, keys[i])) << i;
  EXPECT_TRUE((*rt)->Remove(kTestNs, keys).ok()) << "the failed load left blocks pinned";
  EXPECT_EQ((*rt)->Lookup(kTestNs, keys)->hit_blocks, 0u);
  EXPECT_EQ((*rt)->Stats().tiers[0].used_bytes, 0u);
}

// nanoseconds::max() is "no deadline": reads from a slow tier are waited for,
// not failed at once because now() + timeout wrapped into the past.
TEST(RuntimeLimits, ALoadWithNoDeadlineWaitsForASlowTier) {
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 4);
  o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
  o.tiers.push_back(LowerHostTier("slow", bb, 32));
  o.tier_factory = [](const TierOptions& t, const TierContext& c) -> Result<std::unique_ptr<Tier>> {
    auto inner = CreateTier(t, c);
    if (!inner.ok()) return inner.status();
    FaultOptions f;
    f.latency = std::chrono::milliseconds(20);
    return NewFaultInjectingTier(std::move(inner).value(), f);
  };
  auto rt = Runtime::Open(o, setup.engine);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  SimEngine sim(rt->get(), setup.engine.get());
  const auto keys = ChainKeys({1, 2, 3, 4});
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  ASSERT_TRUE((*rt)->TEST_RunMoverOnce().ok());
  ASSERT_EQ((*rt)->Lookup(kTestNs, keys)->tier, (std::vector<uint8_t>{0, 1, 1, 1}));
  sim.Scrub(0, 64);
  const std::vector<uint32_t> blocks = {10, 11, 12, 13};
  Completion c = (*rt)->Load(kTestNs, keys, blocks, std::chrono::nanoseconds::max());
  ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim.Holds(10 + i, keys[i])) << i;
}

// No keys but engine blocks: the sizes differ, and the call must say so even
// though it has no item to carry the error.
TEST(RuntimeLimits, CallsWithNoKeysButEngineBlocksAreRefused) {
  EngineSetup setup = MakeEngine(64);
  auto rt = Runtime::Open(MakeOptions(setup.layout.BlockBytes(), 4), setup.engine);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  const std::vector<uint32_t> one = {0};
  EXPECT_EQ((*rt)->Save(kTestNs, std::nullopt, {}, one).Wait().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*rt)->Load(kTestNs, {}, one, std::chrono::seconds(1)).Wait().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*rt)->Save(kTestNs, std::nullopt, {}, {}).Wait().ok());
}

TEST(RuntimeLimits, ATierFactoryThatReturnsNoTierIsAnError) {
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 4);
  o.tiers.push_back(LowerHostTier("none", bb, 32));
  o.tier_factory = [](const TierOptions&, const TierContext&) -> Result<std::unique_ptr<Tier>> {
    return std::unique_ptr<Tier>();
  };
  auto rt = Runtime::Open(o, setup.engine);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().ToString(),
            "invalid_argument: tier 'none': the tier factory returned no tier");
}

}  // namespace
}  // namespace kvtier::testing
