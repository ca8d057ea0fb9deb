// A block another process saves again, with other bytes, in a shared tier
// while this runtime's mover is sending the block on to the tier below. A
// load that reads the new bytes meanwhile takes them (and their checksum);
// the mover judges its read by the checksum it had when it chose the block,
// never by one a load writes while it reads (under TSan, that read was a
// data race), and a copy it wrote with the old bytes is not indexed once a
// load has taken the new ones.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {
namespace {

class SharedRewriteTest : public ::testing::Test {
 protected:
  // Hub (8) over "shared" (8, a shared tier: the view of `inner_`) over
  // "disk" (32); a pass demotes every saved block, and the shared tier's
  // blocks go down once it holds 5 of 8. `shared_hooks` / `disk_hooks`
  // are the views' hooks.
  void Open(TierViewHooks shared_hooks, TierViewHooks disk_hooks = {}) {
    auto made = CreateTier(LowerHostTier("shared", bb_, 8), TierContext{bb_});
    ASSERT_TRUE(made.ok());
    inner_ = std::shared_ptr<Tier>(std::move(made).value());
    RuntimeOptions o = MakeOptions(bb_, 8);
    o.tiers[0].watermarks = {.high = 0.1, .low = 0.01};
    o.tiers.push_back(LowerHostTier("shared", bb_, 8));
    o.tiers.back().shared = true;
    o.tiers.back().watermarks = {.high = 0.5, .low = 0.01};
    o.tiers.push_back(LowerHostTier("disk", bb_, 32));
    o.tier_factory = [this, shared_hooks, disk_hooks](
                         const TierOptions& t,
                         const TierContext& c) -> Result<std::unique_ptr<Tier>> {
      if (t.name == "shared") {
        return NewTierView(inner_, TierCapabilities{.shared = true, .checksummed = true},
                           shared_hooks);
      }
      auto disk = CreateTier(t, c);
      if (!disk.ok()) return disk.status();
      return NewTierView(std::shared_ptr<Tier>(std::move(disk).value()), {}, disk_hooks);
    };
    auto opened = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    rt_ = std::move(opened).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  void TearDown() override {
    sim_.reset();
    rt_.reset();
    if (inner_) inner_->Shutdown();
  }

  // Saves `a` and demotes it to the shared tier, then saves `b`: the next
  // pass sends all five blocks down to the disk.
  void SaveAThenB() {
    sim_->Prefill(a_, 0);
    ASSERT_TRUE(sim_->SaveFrom(a_, 0, 0).status().ok());
    ASSERT_EQ(*rt_->TEST_RunMoverOnce(), 1u);
    ASSERT_EQ(rt_->Lookup(kTestNs, a_)->tier, (std::vector<uint8_t>{1}));
    sim_->Prefill(b_, 4);
    ASSERT_TRUE(sim_->SaveFrom(b_, 0, 4).status().ok());
  }
  // Another process saves `a` again in the shared tier, with `theirs_`.
  void RewriteA() {
    ASSERT_TRUE(
        inner_->Write(kTestNs, std::vector<WriteOp>{{a_[0], theirs_, std::nullopt}}).Wait().ok());
  }
  // Loads `a` into engine block `block`: it must be `theirs_`, no tier may
  // have found a corrupt copy.
  void ExpectTheirs(uint32_t block) {
    Completion c = sim_->Load(a_, block);
    ASSERT_TRUE(c.result(0).ok()) << c.result(0).ToString();
    std::vector<std::byte> got(bb_);
    ASSERT_TRUE(setup_.engine->ReadBlock(block, got).ok());
    EXPECT_EQ(got, theirs_) << "not the shared tier's new bytes";
    for (size_t t = 1; t < 3; ++t) EXPECT_EQ(rt_->Stats().tiers[t].corruptions, 0u) << t;
  }

  EngineSetup setup_ = MakeEngine(64);
  const uint64_t bb_ = setup_.layout.BlockBytes();
  const std::vector<BlockKey> a_ = ChainKeys({100});
  const std::vector<BlockKey> b_ = ChainKeys({1, 2, 3, 4});
  const std::vector<std::byte> theirs_ = BlockBytes(a_[0], bb_, /*version=*/7);
  std::shared_ptr<Tier> inner_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

// The load runs to its end while the mover reads the shared tier.
TEST_F(SharedRewriteTest, ALoadTakingNewBytesWhileTheMoverReadsTheBlockLeavesBothConsistent) {
  std::thread loader;
  std::atomic<bool> armed{false};
  std::atomic<bool> loaded{false};  // relaxed on purpose: no ordering for TSan to see
  Status load_status = Status::Internal("not loaded");
  TierViewHooks hooks;
  hooks.before_read = [&] {
    if (!armed.exchange(false)) return;
    loader = std::thread([&] {
      Completion l = SimEngine(rt_.get(), setup_.engine.get()).Load(a_, 20);
      load_status = l.result(0);
      loaded.store(true, std::memory_order_relaxed);
    });
    for (int i = 0; i < 10'000 && !loaded.load(std::memory_order_relaxed); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  ASSERT_NO_FATAL_FAILURE(Open(hooks));
  ASSERT_NO_FATAL_FAILURE(SaveAThenB());
  ASSERT_NO_FATAL_FAILURE(RewriteA());
  armed = true;
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_TRUE(loader.joinable()) << "the mover never read the shared tier";
  loader.join();
  ASSERT_TRUE(load_status.ok()) << load_status.ToString();
  std::vector<std::byte> got(bb_);
  ASSERT_TRUE(setup_.engine->ReadBlock(20, got).ok());
  EXPECT_EQ(got, theirs_) << "the load did not take the shared tier's new bytes";
  // Wherever the mover left it, `a` loads as the new bytes and nothing else.
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());  // sends the loaded copy down again
  sim_->Scrub(0, 64);
  ExpectTheirs(30);
}

// The mover read the old bytes; the other process's save and a load of the
// new bytes come while the mover writes the old ones to the disk. That copy
// was indexed, with the old bytes under the new checksum: once the others
// were gone, a load found it corrupt and missed.
TEST_F(SharedRewriteTest, ACopyWrittenWithBytesALoadReplacedMeanwhileIsNotIndexed) {
  std::atomic<bool> armed{false};
  TierViewHooks disk_hooks;
  disk_hooks.before_write = [&]() -> Status {
    if (!armed.exchange(false)) return Status::Ok();
    RewriteA();
    std::thread([&] { ExpectTheirs(20); }).join();
    return Status::Ok();
  };
  ASSERT_NO_FATAL_FAILURE(Open({}, disk_hooks));
  ASSERT_NO_FATAL_FAILURE(SaveAThenB());
  armed = true;
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_FALSE(armed) << "the mover wrote nothing to the disk";
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());  // the hub's copy from the load goes
  sim_->Scrub(0, 64);
  ExpectTheirs(30);
}

}  // namespace
}  // namespace kvtier::testing
