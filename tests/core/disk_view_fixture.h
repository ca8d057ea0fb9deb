// A runtime over a lower "disk" tier that outlives it: every OpenOver()
// builds a runtime whose only lower tier is a view of the same disk, so a
// test can end one runtime and open another over what the disk kept (a
// restart), with the capabilities and hooks the test gives the view.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <utility>

#include "tests/core/runtime_test_util.h"
#include "tests/support/fault_tier.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {

class DiskViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_ = MakeEngine(64);
    bb_ = setup_.layout.BlockBytes();
    UseDiskOf(32);
  }
  void TearDown() override { disk_->Shutdown(); }

  // Replaces the disk by an empty one of `blocks` blocks.
  void UseDiskOf(uint64_t blocks) {
    if (disk_ != nullptr) disk_->Shutdown();
    disk_blocks_ = blocks;
    auto disk = CreateTier(LowerHostTier("disk", bb_, blocks), TierContext{bb_});
    ASSERT_TRUE(disk.ok());
    disk_ = std::shared_ptr<Tier>(std::move(disk).value());
  }

  // A hub of `hub_blocks` with `watermarks` over a view of the disk.
  std::unique_ptr<Runtime> OpenOver(uint64_t hub_blocks, WatermarkOptions watermarks,
                                    TierCapabilities caps, TierViewHooks hooks = {}) {
    RuntimeOptions o = MakeOptions(bb_, hub_blocks);
    o.tiers[0].watermarks = watermarks;
    o.state_blocks = state_blocks_;
    o.mover.shutdown_writeback_ms = shutdown_writeback_ms_;
    o.tiers.push_back(LowerHostTier("disk", bb_, disk_blocks_));
    o.tiers.back().admission = disk_admission_;
    if (disk_watermarks_) o.tiers.back().watermarks = *disk_watermarks_;
    o.tiers.back().policy.frequency_threshold = 2;
    if (failing_tier_below_) o.tiers.push_back(LowerHostTier("below", bb_, disk_blocks_));
    std::shared_ptr<Tier> disk = disk_;
    const uint64_t bb = bb_;
    o.tier_factory = [disk, caps, hooks, bb, faults = disk_faults_](
                         const TierOptions& t,
                         const TierContext&) -> Result<std::unique_ptr<Tier>> {
      if (t.name != "below") {
        std::unique_ptr<Tier> view = NewTierView(disk, caps, hooks);
        if (!faults) return view;
        return NewFaultInjectingTier(std::move(view), *faults);
      }
      auto below = CreateTier(t, TierContext{bb});
      if (!below.ok()) return below.status();
      auto fail = [] { return Status::IOError("the tier below the disk fails every write"); };
      return NewTierView(std::shared_ptr<Tier>(std::move(below).value()), TierCapabilities{},
                         TierViewHooks{.before_write = fail});
    };
    auto rt = Runtime::Open(o, setup_.engine);
    EXPECT_TRUE(rt.ok()) << rt.status().ToString();
    return rt.ok() ? std::move(rt).value() : nullptr;
  }

  EngineSetup setup_;
  uint64_t bb_ = 0;
  std::shared_ptr<Tier> disk_;
  uint64_t disk_blocks_ = 0;
  std::optional<WatermarkOptions> disk_watermarks_;  // unset: the tier's defaults
  uint32_t state_blocks_ = 0;  // RuntimeOptions::state_blocks of the runtimes OpenOver builds
  // MoverOptions::shutdown_writeback_ms of those runtimes.
  uint64_t shutdown_writeback_ms_ = 0;
  // Faults injected into those runtimes' view of the disk; unset: none.
  std::optional<FaultOptions> disk_faults_;
  // Whether those runtimes have a third tier below the disk, every write to
  // which fails (it is the runtime's own, not kept over restarts).
  bool failing_tier_below_ = false;
  // The disk's admission (frequency admits on the 2nd sighting).
  std::vector<std::string> disk_admission_{"always"};
};

}  // namespace kvtier::testing
