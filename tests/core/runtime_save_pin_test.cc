// A save into a full hub makes room without evicting the blocks it hangs
// off: its parent and the keys of its chain stored already.
#include <gtest/gtest.h>

#include <string>

#include "tests/core/runtime_policy_fixture.h"

namespace kvtier::testing {
namespace {

constexpr WatermarkOptions kNoMover{.high = 1.0, .low = 0.5};

std::vector<uint64_t> Ids(uint64_t first, uint64_t n) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < n; ++i) ids.push_back(first + i);
  return ids;
}

using SavePinTest = RuntimePolicyTest;

// Every byte of `ids` loads back as saved.
void ExpectLoads(SimEngine& sim, const std::vector<uint64_t>& ids) {
  const auto keys = ChainKeys(ids);
  sim.Scrub(0, 64);
  ASSERT_TRUE(sim.Load(keys, 20).status().ok());
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim.Holds(20 + i, keys[i])) << i;
}

// Hub of 5 holding {1..4} and {9}: the save of 5 under parent 4 evicts 9,
// the only block it does not hang off, rather than its parent.
TEST_F(SavePinTest, SaveUnderAParentEvictsAnotherBlockNotTheParent) {
  Open(Options(5, kNoMover));
  Save(Ids(1, 4));
  Save({9});
  const auto keys = ChainKeys(Ids(1, 5));
  sim_->Prefill(keys, 0);
  Completion c = sim_->SaveFrom(keys, 4, 0);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  EXPECT_EQ(Hits(Ids(1, 5)), 5u);
  EXPECT_FALSE(Stored({9}));
  ExpectLoads(*sim_, Ids(1, 5));
}

// Hub of 4 holding {1..4}: no block the save of 5 under 4 may evict. It
// fails as a full hub, and the chain it hangs off stays whole and unpinned.
TEST_F(SavePinTest, SaveUnderAParentFailsAsFullWhenOnlyItsChainCouldGo) {
  Open(Options(4, kNoMover));
  Save(Ids(1, 4));
  const auto keys = ChainKeys(Ids(1, 5));
  sim_->Prefill(keys, 0);
  Completion c = sim_->SaveFrom(keys, 4, 0);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c.result(0).code(), StatusCode::kResourceExhausted) << c.result(0).ToString();
  EXPECT_NE(c.result(0).message().find("is full and nothing can be evicted"), std::string::npos)
      << c.result(0).ToString();
  EXPECT_EQ(Hits(Ids(1, 5)), 4u);
  ExpectLoads(*sim_, Ids(1, 4));
  // Every pin the save took is gone: the chain can be removed.
  EXPECT_TRUE(rt_->Remove(kTestNs, ChainKeys(Ids(1, 4))).ok());
  EXPECT_EQ(Hits(Ids(1, 4)), 0u);
}

// Over a lower tier whose admission refuses every block, the room for 5
// under parent 4 is made by writing 4 down all the same (forced), not by
// dropping it.
TEST_F(SavePinTest, SaveUnderAParentForcesItDownWhenTheLowerTierRefusesIt) {
  RuntimeOptions o = Options(4, kNoMover);
  TierOptions& ssd = AddLower(o, bb_);
  ssd.admission = {"frequency"};
  ssd.policy.frequency_threshold = 1000;
  Open(o);
  Save(Ids(1, 4));
  const auto keys = ChainKeys(Ids(1, 5));
  sim_->Prefill(keys, 0);
  Completion c = sim_->SaveFrom(keys, 4, 0);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  EXPECT_EQ(Where(Ids(1, 5)), (std::vector<uint8_t>{0, 0, 0, 1, 0}));
  EXPECT_EQ(rt_->Stats().tiers[1].forced_blocks, 1u);
}

// Hub of 5 holding {1..4} and {9}: saving the whole chain {1..5} again
// copies only block 5, making room with 9, not with its own prefix.
TEST_F(SavePinTest, ResavedChainEvictsAnotherBlockNotItsPrefix) {
  Open(Options(5, kNoMover));
  Save(Ids(1, 4));
  Save({9});
  const auto keys = ChainKeys(Ids(1, 5));
  sim_->Prefill(keys, 0);
  Completion c = sim_->SaveFrom(keys, 0, 0);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  EXPECT_EQ(Hits(Ids(1, 5)), 5u);
  EXPECT_FALSE(Stored({9}));
  const RuntimeStats s = rt_->Stats();
  EXPECT_EQ(s.saved_blocks, 6u) << "1..4, 9 and 5: no block copied twice";
  EXPECT_EQ(s.save_duplicates, 4u);
  ExpectLoads(*sim_, Ids(1, 5));
}

// Hub of 4 holding {1..4}: saving {1..5} cannot store 5 without cutting the
// chain. Block 5 fails as a full hub; blocks 1..4 stay, not copied again.
TEST_F(SavePinTest, ResavedChainKeepsItsPrefixWhenTheHubIsFull) {
  Open(Options(4, kNoMover));
  Save(Ids(1, 4));
  const auto keys = ChainKeys(Ids(1, 5));
  sim_->Prefill(keys, 0);
  Completion c = sim_->SaveFrom(keys, 0, 0);
  ASSERT_EQ(c.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(c.result(i).ok()) << i;
  EXPECT_EQ(c.result(4).code(), StatusCode::kResourceExhausted) << c.result(4).ToString();
  EXPECT_EQ(Hits(Ids(1, 5)), 4u);
  EXPECT_EQ(rt_->Stats().saved_blocks, 4u) << "block 4 was not evicted and copied again";
  ExpectLoads(*sim_, Ids(1, 4));
  EXPECT_TRUE(rt_->Remove(kTestNs, ChainKeys(Ids(1, 4))).ok());
}

}  // namespace
}  // namespace kvtier::testing
