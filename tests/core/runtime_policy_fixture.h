// The fixture of the runtime policy tests (runtime_policy_test.cc,
// runtime_eviction_test.cc): a hub over one lower host tier, time from a
// ManualClock, the mover run only when a test calls it.
#pragma once

#include <gtest/gtest.h>

#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {

constexpr uint64_t kSecond = 1000000000ULL;

class RuntimePolicyTest : public ::testing::Test {
 protected:
  RuntimePolicyTest() : setup_(MakeEngine(64)), bb_(setup_.layout.BlockBytes()) {}

  // A hub of `hub_blocks` with `hub_wm`; AddLower adds one lower host tier of
  // 16 blocks named "ssd" and returns it to configure.
  RuntimeOptions Options(uint64_t hub_blocks, WatermarkOptions hub_wm) {
    RuntimeOptions o = MakeOptions(bb_, hub_blocks);
    o.tiers[0].watermarks = hub_wm;
    o.clock = clock_;
    o.block_tokens = setup_.layout.block_tokens;
    return o;
  }
  static TierOptions& AddLower(RuntimeOptions& o, uint64_t bb) {
    o.tiers.push_back(LowerHostTier("ssd", bb, 16));
    return o.tiers.back();
  }
  void Open(const RuntimeOptions& o) {
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  // Saves the chain `ids`; returns the completion.
  Completion Save(const std::vector<uint64_t>& ids, const SaveOptions& opts = {}) {
    auto keys = ChainKeys(ids);
    sim_->Prefill(keys, 0);
    std::vector<uint32_t> blocks;
    for (uint32_t i = 0; i < keys.size(); ++i) blocks.push_back(i);
    Completion c = rt_->Save(kTestNs, std::nullopt, keys, blocks, opts);
    EXPECT_TRUE(c.Wait().ok());
    return c;
  }
  size_t Hits(const std::vector<uint64_t>& ids) {
    auto r = rt_->Lookup(kTestNs, ChainKeys(ids));
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->hit_blocks : 0;
  }
  // The fastest tier of each leading hit.
  std::vector<uint8_t> Where(const std::vector<uint64_t>& ids) {
    auto r = rt_->Lookup(kTestNs, ChainKeys(ids));
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->tier : std::vector<uint8_t>{};
  }
  // Stored somewhere; unlike Lookup, not a sighting.
  bool Stored(const std::vector<uint64_t>& ids) { return rt_->IsSaved(kTestNs, ChainKeys(ids)); }
  size_t Move() {
    auto moved = rt_->TEST_RunMoverOnce();
    EXPECT_TRUE(moved.ok());
    return moved.ok() ? *moved : 0;
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>(kSecond);
  EngineSetup setup_;
  const uint64_t bb_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

// A hub of 2 blocks with these watermarks demotes each saved block at once:
// 1 used > 0.8, down to 0.4.
constexpr WatermarkOptions kOneAtATime{.high = 0.4, .low = 0.2};

}  // namespace kvtier::testing
