// Two removes of one key from a lower tier at once: the key stays listed as
// being removed there until both have landed, so no write of it slips in
// between and is then deleted by the later one.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "tests/core/gated_runtime.h"

namespace kvtier::testing {
namespace {

class RuntimeRemoveRaceTest : public HubOverGateTest {
 protected:
  // Starts a Remove of K4 (*a) and waits until the gate holds it before the
  // tier.
  void HoldARemoveOfK4(std::future<Status>* a) {
    gate_->gate_removes = true;
    std::future<void> held = gate_->remove_held.get_future();
    *a = std::async(std::launch::async, [this, k4 = K4()] { return rt_->Remove(kTestNs, k4); });
    ASSERT_EQ(held.wait_for(std::chrono::seconds(5)), std::future_status::ready)
        << "the remove never reached the tier";
  }
  // Lets the held Remove `a` land; it must end, OK.
  void ReleaseTheHeldRemove(std::future<Status>& a) {
    gate_->open_remove_gate.set_value();
    ASSERT_EQ(a.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "the remove hung";
    EXPECT_TRUE(a.get().ok());
  }
  std::vector<BlockKey> K4() const { return {keys_[3]}; }
};

// Remove A of K4 is held at the gate before it reaches the tier; remove B
// of K4 goes through. K4 is saved again and the mover sends it down while A
// is still held; then A lands. Whatever a lookup finds afterwards must load
// with its own bytes: a copy written between B and A would be deleted by A
// while the index still names it. And K4 itself is not lost: the mover
// keeps it in the hub until A has landed (it used to drop it there, as if
// the tier below had refused it).
TEST_F(RuntimeRemoveRaceTest, AWriteDoesNotSlipBetweenTwoRemovesOfTheSameKey) {
  std::future<Status> a;
  ASSERT_NO_FATAL_FAILURE(HoldARemoveOfK4(&a));
  ASSERT_TRUE(rt_->Remove(kTestNs, K4()).ok());  // remove B, past the gate

  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());  // K4 back in the hub
  const auto x = ChainKeys({20, 21});
  sim_->Prefill(x, 10);
  ASSERT_TRUE(sim_->SaveFrom(x, 0, 10).status().ok());  // the hub full: K1, K4, X1, X2
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());

  ASSERT_NO_FATAL_FAILURE(ReleaseTheHeldRemove(a));

  const auto found = rt_->Lookup(kTestNs, keys_);
  ASSERT_TRUE(found.ok());
  const size_t hits = found->hit_blocks;
  ASSERT_EQ(hits, 4u) << "K1..K3 were never removed; K4 was saved again";
  sim_->Scrub(0, 64);
  const std::vector<BlockKey> hit_keys(keys_.begin(), keys_.begin() + static_cast<long>(hits));
  Completion c = sim_->Load(hit_keys, 40);
  for (uint32_t i = 0; i < hits; ++i) {
    EXPECT_TRUE(c.result(i).ok()) << "K" << i + 1 << ": " << c.result(i).ToString();
    EXPECT_TRUE(sim_->Holds(40 + i, keys_[i])) << "K" << i + 1;
  }
}

// A Remove of K4 is held below while K4, saved again, is the least recent
// leaf of a full hub. A save that needs one slot must get it from another
// block: K4, which waits in the hub for that Remove, used to be the one
// victim chosen, so nothing left and the save failed.
TEST_F(RuntimeRemoveRaceTest, ASaveNeedingRoomPassesOverABlockWaitingForItsRemove) {
  std::future<Status> a;
  ASSERT_NO_FATAL_FAILURE(HoldARemoveOfK4(&a));
  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());  // K4 back in the hub
  const auto x = ChainKeys({20, 21});
  sim_->Prefill(x, 10);
  ASSERT_TRUE(sim_->SaveFrom(x, 0, 10).status().ok());    // the hub full: K1, K4, X1, X2
  ASSERT_TRUE(sim_->Load({keys_[0]}, 30).status().ok());  // K1 the most recent
  const auto y = ChainKeys({30});
  sim_->Prefill(y, 20);
  Completion saved = sim_->SaveFrom(y, 0, 20);
  EXPECT_TRUE(saved.status().ok()) << saved.status().ToString();
  ASSERT_NO_FATAL_FAILURE(ReleaseTheHeldRemove(a));
  EXPECT_EQ(rt_->Lookup(kTestNs, y)->hit_blocks, 1u);
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 4u) << "K4 was lost";
}

}  // namespace
}  // namespace kvtier::testing
