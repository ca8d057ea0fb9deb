// A save of a block the mover is moving after its last copy was found lost.
// The mover picks K2 from t1 (its only copy) to write down to t2 and is held
// while t2 reports its usage; meanwhile t1 loses K2 and a load finds it lost,
// so K2 has no copy while it is still being moved. A save of K2 must not
// take it for stored: it answered OK with 0 bytes, and the mover then
// dropped K2, so the engine freed blocks that were stored nowhere.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/tier_view.h"

namespace kvtier::testing {
namespace {

// Holds the next Usage() of t2 (the mover's, as it makes room there) until
// Open().
struct UsageGate {
  std::atomic<bool> armed{false};
  std::promise<void> held;
  std::promise<void> open;
  void Wait() {
    if (!armed.exchange(false)) return;
    held.set_value();
    open.get_future().wait();
  }
};

class MovingSaveTest : public ::testing::Test {
 protected:
  // Hub of 4 over t1 (4 blocks, high mark 0.5) over t2 (32). K1..K4 are
  // saved and one mover pass writes them down; Y1..Y3 fill the hub. The
  // next pass, demoting from t1, is held at t2; then t1 loses K2, and a load
  // of K2 finds it lost.
  void SetUp() override {
    setup_ = MakeEngine(64);
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 4);
    o.worker_threads = 3;  // two for saves, one kept for loads
    o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
    o.tiers.push_back(LowerHostTier("t1", bb, 4));
    o.tiers[1].watermarks = {.high = 0.5, .low = 0.25};
    o.tiers.push_back(LowerHostTier("t2", bb, 32));
    o.tier_factory = [this](const TierOptions& t,
                            const TierContext& c) -> Result<std::unique_ptr<Tier>> {
      auto inner = CreateTier(t, c);
      if (!inner.ok()) return inner;
      std::shared_ptr<Tier> shared(std::move(inner).value());
      TierViewHooks hooks;
      if (t.name == "t1") {
        t1_ = shared;
      } else {
        hooks.before_usage = [gate = &gate_] { gate->Wait(); };
      }
      return NewTierView(shared, shared->capabilities(), hooks);
    };
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
    sim_->Prefill(k_, 0);
    ASSERT_TRUE(sim_->SaveFrom(k_, 0, 0).status().ok());
    ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
    const auto y = ChainKeys({11, 12, 13});
    sim_->Prefill(y, 10);
    ASSERT_TRUE(sim_->SaveFrom(y, 0, 10).status().ok());

    std::future<void> held = gate_.held.get_future();
    gate_.armed = true;
    mover_ = std::thread([this] { (void)rt_->TEST_RunMoverOnce(); });
    ASSERT_EQ(held.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    // t1 loses K2 (a TTL expiry, say), and nothing else changes.
    ASSERT_TRUE(t1_->Remove(kTestNs, std::span(&k_[1], 1)).Wait().ok());
    Completion lost = sim_->Load(std::vector<BlockKey>{k_[1]}, 40);
    ASSERT_EQ(lost.result(0).code(), StatusCode::kNotFound) << lost.result(0).ToString();
    // The engine computes K1, K2 again and saves them.
    sim_->Prefill(k12_, 20);
  }
  void TearDown() override {
    if (mover_.joinable()) {
      if (!opened_) gate_.open.set_value();
      mover_.join();
    }
    rt_.reset();
    if (t1_) t1_->Shutdown();
  }
  Completion SaveK12() {
    const std::vector<uint32_t> blocks = {20, 21};
    return rt_->Save(kTestNs, std::nullopt, k12_, blocks);
  }
  void OpenMover() {
    opened_ = true;
    gate_.open.set_value();
  }

  const std::vector<BlockKey> k_ = ChainKeys({1, 2, 3, 4});
  const std::vector<BlockKey> k12_ = {k_[0], k_[1]};
  EngineSetup setup_;
  UsageGate gate_;
  std::shared_ptr<Tier> t1_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  std::thread mover_;
  bool opened_ = false;
};
// The save waits for the move to settle, then gives K2 its copy again.
TEST_F(MovingSaveTest, ASaveWaitsForTheMoveAndStoresTheBlockAgain) {
  Completion saved = SaveK12();
  (void)saved.WaitFor(std::chrono::milliseconds(300));
  EXPECT_FALSE(saved.Poll()) << "the save answered while K2 was still being moved";
  OpenMover();
  mover_.join();
  ASSERT_TRUE(saved.WaitFor(std::chrono::seconds(5)).ok()) << saved.status().ToString();
  EXPECT_EQ(saved.bytes(1), setup_.layout.BlockBytes()) << "K2 was not copied";
  ASSERT_TRUE(rt_->IsSaved(kTestNs, k12_)) << "the save answered OK for a block not stored";
  sim_->Scrub(0, 64);
  ASSERT_TRUE(sim_->Load(k12_, 30).status().ok());
  EXPECT_TRUE(sim_->Holds(30, k_[0]));
  EXPECT_TRUE(sim_->Holds(31, k_[1]));
}

// The move outlasts the save's wait: K2 fails DeadlineExceeded, not OK.
TEST_F(MovingSaveTest, ASaveFailsABlockStillBeingMovedAfterItsWait) {
  Completion saved = SaveK12();
  (void)saved.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(saved.Poll()) << "the save did not give up waiting";
  EXPECT_TRUE(saved.result(0).ok()) << saved.result(0).ToString();
  EXPECT_EQ(saved.result(1).code(), StatusCode::kDeadlineExceeded) << saved.result(1).ToString();
  EXPECT_NE(saved.result(1).message().find("is still being moved"), std::string::npos)
      << saved.result(1).ToString();
  OpenMover();
  mover_.join();
  EXPECT_FALSE(rt_->IsSaved(kTestNs, k12_));
}

}  // namespace
}  // namespace kvtier::testing
