// The runtime running the admission policies of policy.h on demoted blocks
// (frequency, write_budget, cost, marconi with Save hints), forced writes of
// refused parents, hub admission on Save, and policies that cannot be built.
#include <gtest/gtest.h>

#include "tests/core/runtime_policy_fixture.h"

namespace kvtier::testing {
namespace {

TEST_F(RuntimePolicyTest, FrequencyWritesABlockBelowOnlyOnItsThirdSighting) {
  RuntimeOptions o = Options(2, kOneAtATime);
  TierOptions& ssd = AddLower(o, bb_);
  ssd.admission = {"frequency"};
  ssd.policy.frequency_threshold = 3;
  Open(o);
  for (uint64_t round = 1; round <= 3; ++round) {
    SCOPED_TRACE(round);
    EXPECT_EQ(Hits({7}), 0u);  // sighting `round`: a miss, the block was dropped
    Save({7});
    ASSERT_EQ(Move(), 1u);
    RuntimeStats st = rt_->Stats();
    const bool admitted = round == 3;
    EXPECT_EQ(st.tiers[1].admitted_blocks, admitted ? 1u : 0u);
    EXPECT_EQ(st.tiers[1].admission_rejected_blocks, admitted ? 2u : round);
    EXPECT_EQ(st.tiers[1].blocks_written, admitted ? 1u : 0u);
    EXPECT_EQ(st.tiers[1].forced_blocks, 0u);
    EXPECT_EQ(st.tiers[0].evicted_blocks, round);
    EXPECT_EQ(Stored({7}), admitted);
  }
  auto r = rt_->Lookup(kTestNs, ChainKeys({7}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tier, std::vector<uint8_t>{1});
}

// A scheduler asks about a waiting request at every step: lookups carrying
// the same request id are one sighting, so `frequency` (admit on the 2nd)
// still refuses a block only that one request named. Lookups without an id
// each count. Before, the repeats made the block look used again.
TEST_F(RuntimePolicyTest, LookupsOfOneRequestIdAreOneSighting) {
  RuntimeOptions o = Options(2, kOneAtATime);
  TierOptions& ssd = AddLower(o, bb_);
  ssd.admission = {"frequency"};
  ssd.policy.frequency_threshold = 2;
  Open(o);
  const LookupOptions waiting{.request_id = 42};
  for (int step = 0; step < 3; ++step) {
    auto r = rt_->Lookup(kTestNs, ChainKeys({7}), waiting);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->hit_blocks, 0u);
  }
  auto pinned = rt_->LookupAndPin(kTestNs, ChainKeys({7}), waiting);
  ASSERT_TRUE(pinned.ok());
  Save({7});
  ASSERT_EQ(Move(), 1u);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 1u);
  EXPECT_EQ(st.tiers[1].admitted_blocks, 0u);
  EXPECT_EQ(st.lookups, 4u);  // still counted as lookups

  // A second request naming the block is its second sighting.
  ASSERT_TRUE(rt_->Lookup(kTestNs, ChainKeys({8}), LookupOptions{.request_id = 43}).ok());
  EXPECT_EQ(Hits({7}), 0u);  // no id: a sighting
  Save({7});
  ASSERT_EQ(Move(), 1u);
  st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 1u);
  EXPECT_TRUE(Stored({7}));
}

TEST_F(RuntimePolicyTest, WriteBudgetRefusesOnceTheBudgetIsSpent) {
  RuntimeOptions o = Options(2, kOneAtATime);
  TierOptions& ssd = AddLower(o, bb_);
  ssd.admission = {"write_budget"};
  ssd.policy.write_budget_bytes_per_day = bb_ * 86400;  // one block per second
  ssd.policy.write_interval_ms = 1000;
  Open(o);
  // The first second's allowance is its share, one block: of 3, 1 is
  // written and 2 refused.
  for (uint64_t id : {1, 2, 3}) {
    Save({id});
    ASSERT_EQ(Move(), 1u);
  }
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 1u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 2u);
  EXPECT_TRUE(Stored({1}));
  EXPECT_FALSE(Stored({2}));
  EXPECT_FALSE(Stored({3}));
  // One second on: 3 blocks were offered for a budget of 1, so each is
  // admitted with probability 1/3, and the interval's allowance (one block)
  // caps what passes: block 4 (the tier's seeded coin), not 5.
  clock_->Advance(kSecond);
  for (uint64_t id : {4, 5}) {
    Save({id});
    ASSERT_EQ(Move(), 1u);
  }
  st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 2u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 3u);
  EXPECT_TRUE(Stored({4}));
  EXPECT_FALSE(Stored({5}));
  // Four seconds later the budget has refilled: block 6 is written.
  clock_->Advance(4 * kSecond);
  Save({6});
  ASSERT_EQ(Move(), 1u);
  st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 3u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 3u);
  EXPECT_EQ(st.tiers[1].blocks_written, 3u);
  EXPECT_EQ(st.tiers[1].bytes_written, 3 * bb_);
  EXPECT_TRUE(Stored({6}));
}

// cost admission with a model of 1 layer, width 1: a block at depth d saves
// 24*8 + 4*64*(2d+1) FLOPs (448, 960, ...). Loading takes 1 s + 500 s at
// 1 FLOP/s: roots are refused, deeper blocks admitted.
RuntimeOptions CostOptions(RuntimeOptions o, uint64_t bb) {
  o.model_cost = {.layers = 1, .hidden = 1, .kv_bytes_per_token = bb / 8};
  o.gpu_flops_per_s = 1;
  o.tiers.push_back(LowerHostTier("ssd", bb, 16));
  o.tiers[1].admission = {"cost"};
  o.tiers[1].read_bytes_per_s = static_cast<double>(bb);
  o.tiers[1].read_latency_s = 500;
  return o;
}

TEST_F(RuntimePolicyTest, ARefusedParentIsWrittenWhenItsChildGoesBelow) {
  // 3 used > 1.5: all three leave in one pass, children first.
  Open(CostOptions(Options(3, {.high = 0.5, .low = 0.1}), bb_));
  Save({1, 2});
  Save({5});
  ASSERT_EQ(Move(), 3u);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 1u);            // block 2 (depth 1)
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 2u);  // blocks 1 and 5 (roots)
  EXPECT_EQ(st.tiers[1].forced_blocks, 1u);              // block 1: its child is below
  EXPECT_EQ(st.tiers[1].blocks_written, 2u);
  EXPECT_EQ(st.tiers[0].evicted_blocks, 3u);
  auto r = rt_->Lookup(kTestNs, ChainKeys({1, 2}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tier, (std::vector<uint8_t>{1, 1}));
  EXPECT_FALSE(Stored({5}));
  sim_->Scrub(0, 64);
  auto keys = ChainKeys({1, 2});
  ASSERT_TRUE(sim_->Load(keys, 10).status().ok());
  EXPECT_TRUE(sim_->Holds(10, keys[0]));
  EXPECT_TRUE(sim_->Holds(11, keys[1]));
}

TEST_F(RuntimePolicyTest, ARefusedParentIsForcedInALaterPassToo) {
  // 4 used > 3.6: two blocks leave per pass.
  Open(CostOptions(Options(4, {.high = 0.9, .low = 0.7}), bb_));
  Save({1, 2});
  Save({3});
  Save({4});
  auto parent = ChainKeys({1});
  ASSERT_TRUE(sim_->Load(parent, 10).status().ok());  // block 1 is now the most recent
  ASSERT_EQ(Move(), 2u);  // block 2 (admitted) and block 3 (refused, dropped)
  EXPECT_TRUE(Stored({1, 2}));
  EXPECT_FALSE(Stored({3}));
  Save({5});
  Save({6});
  ASSERT_EQ(Move(), 2u);  // block 4 (refused, dropped), then block 1 (refused, forced)
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 1u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 3u);
  EXPECT_EQ(st.tiers[1].forced_blocks, 1u);
  EXPECT_EQ(st.tiers[1].blocks_written, 2u);
  EXPECT_FALSE(Stored({4}));
  auto r = rt_->Lookup(kTestNs, ChainKeys({1, 2}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tier, (std::vector<uint8_t>{1, 1}));
}

TEST_F(RuntimePolicyTest, SaveHintsReachMarconiAdmission) {
  RuntimeOptions o = Options(2, kOneAtATime);
  AddLower(o, bb_).admission = {"marconi"};
  Open(o);
  Save({1}, SaveOptions{.session_id = 42, .expected_reuse = 0.9f});
  ASSERT_EQ(Move(), 1u);
  Save({2});  // no hint, never looked up: not worth keeping
  ASSERT_EQ(Move(), 1u);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 1u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 1u);
  EXPECT_TRUE(Stored({1}));
  EXPECT_FALSE(Stored({2}));
}

TEST_F(RuntimePolicyTest, TheHubsAdmissionDecidesSaves) {
  RuntimeOptions o = Options(8, {});
  o.tiers[0].admission = {"frequency"};
  o.tiers[0].policy.frequency_threshold = 2;
  Open(o);
  Completion c = Save({1, 2});  // never looked up: block 1 refused, block 2 would dangle
  EXPECT_EQ(c.bytes(0), 0u);
  EXPECT_EQ(c.bytes(1), 0u);
  EXPECT_FALSE(Stored({1}));
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.save_not_admitted, 2u);
  EXPECT_EQ(st.saved_blocks, 0u);
  EXPECT_EQ(st.save_failures, 0u);
  EXPECT_EQ(st.tiers[0].admission_rejected_blocks, 1u);
  EXPECT_EQ(st.tiers[0].admitted_blocks, 0u);

  EXPECT_EQ(Hits({1, 2}), 0u);  // sighting 1
  Save({1, 2});
  EXPECT_FALSE(Stored({1}));
  EXPECT_EQ(Hits({1, 2}), 0u);  // sighting 2
  c = Save({1, 2});
  EXPECT_EQ(c.bytes(0), bb_);
  EXPECT_EQ(c.bytes(1), bb_);
  EXPECT_EQ(Hits({1, 2}), 2u);
  st = rt_->Stats();
  EXPECT_EQ(st.save_not_admitted, 4u);
  EXPECT_EQ(st.saved_blocks, 2u);
  EXPECT_EQ(st.tiers[0].admission_rejected_blocks, 2u);
  EXPECT_EQ(st.tiers[0].admitted_blocks, 2u);

  // A save the engine relies on skips admission (and is not counted in it).
  Save({9}, SaveOptions{.bypass_admission = true});
  EXPECT_TRUE(Stored({9}));
  EXPECT_EQ(rt_->Stats().tiers[0].admission_rejected_blocks, 2u);
}

TEST_F(RuntimePolicyTest, UnbuildablePoliciesFailOpen) {
  RuntimeOptions o = Options(4, {});
  AddLower(o, bb_).admission = {"write_budget"};  // no budget
  auto rt = Runtime::Open(o, setup_.engine);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.status().message(),
            "tier 'ssd': admission write_budget has no budget; expected "
            "policy.write_budget_bytes_per_day > 0");
}

}  // namespace
}  // namespace kvtier::testing
