// The runtime running the policy objects of policy.h: admission of demoted
// blocks (frequency, write_budget, cost, marconi with Save hints), forced
// writes of refused parents, hub admission on Save, and s3fifo / flop_aware
// choosing victims among leaves. Time comes from a ManualClock; the mover
// runs only when the test calls it.
#include <gtest/gtest.h>

#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

constexpr uint64_t kSecond = 1000000000ULL;

class RuntimePolicyTest : public ::testing::Test {
 protected:
  RuntimePolicyTest() : setup_(MakeEngine(64)), bb_(setup_.layout.BlockBytes()) {}

  // A hub of `hub_blocks` with `hub_wm` and, unless `lower` is null, one
  // lower host tier of 16 blocks named "ssd" configured by `lower`.
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

TEST_F(RuntimePolicyTest, WriteBudgetRefusesOnceTheBudgetIsSpent) {
  RuntimeOptions o = Options(2, kOneAtATime);
  TierOptions& ssd = AddLower(o, bb_);
  ssd.admission = {"write_budget"};
  ssd.policy.write_budget_bytes_per_day = bb_ * 86400;  // one block per second
  ssd.policy.write_interval_ms = 1000;
  Open(o);
  // The first second admits all (no history yet): 3 blocks, 2 over budget.
  for (uint64_t id : {1, 2, 3}) {
    Save({id});
    ASSERT_EQ(Move(), 1u);
  }
  EXPECT_EQ(rt_->Stats().tiers[1].admitted_blocks, 3u);
  // One second on: the budget (1 block) is spent twice over, so the admit
  // probability drops to 0 for the interval.
  clock_->Advance(kSecond);
  for (uint64_t id : {4, 5}) {
    Save({id});
    ASSERT_EQ(Move(), 1u);
  }
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 3u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 2u);
  EXPECT_FALSE(Stored({4}));
  EXPECT_FALSE(Stored({5}));
  // Four seconds later the budget has refilled: 5 blocks allowed, 3 written.
  clock_->Advance(4 * kSecond);
  Save({6});
  ASSERT_EQ(Move(), 1u);
  st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 4u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 2u);
  EXPECT_EQ(st.tiers[1].blocks_written, 4u);
  EXPECT_EQ(st.tiers[1].bytes_written, 4 * bb_);
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

// Chain P = {1, 2, 3} saved at 1 s, block Q = {9} at 2 s, into a full hub of
// 4 over a lower tier; one block must go down. LRU takes P's leaf (the
// oldest leaf); flop_aware with a strong FLOPs weight takes Q, a root that
// saves the fewest FLOPs, and never P's root (the lowest score of all) or
// middle while their children are in the hub.
TEST_F(RuntimePolicyTest, FlopAwareDemotesTheCheapestLeafNeverAParent) {
  for (const char* policy : {"lru", "flop_aware"}) {
    SCOPED_TRACE(policy);
    RuntimeOptions o = Options(4, {.high = 0.9, .low = 0.75});
    o.tiers[0].eviction = policy;
    o.tiers[0].policy.flop_alpha = 4;
    AddLower(o, bb_);
    Open(o);
    Save({1, 2, 3});
    clock_->Advance(kSecond);
    Save({9});
    ASSERT_EQ(Move(), 1u);
    const bool lru = std::string(policy) == "lru";
    using Tiers = std::vector<uint8_t>;
    EXPECT_EQ(Where({1, 2, 3}), lru ? Tiers({0, 0, 1}) : Tiers({0, 0, 0}));
    EXPECT_EQ(Where({9}), lru ? Tiers{0} : Tiers{1});
    // Three more single blocks, each pass demoting one: LRU takes P from its
    // leaf up; flop_aware keeps taking the cheap newest roots.
    const Tiers lru_p[] = {{0, 1, 1}, {1, 1, 1}, {1, 1, 1}};
    for (size_t i = 0; i < 3; ++i) {
      clock_->Advance(kSecond);
      Save({20 + i});
      ASSERT_EQ(Move(), 1u);
      EXPECT_EQ(Where({1, 2, 3}), lru ? lru_p[i] : Tiers({0, 0, 0})) << i;
    }
    EXPECT_EQ(rt_->Stats().tiers[0].demoted_blocks, 4u);
    rt_.reset();
  }
}

// A = {1} saved and loaded (used again), then B, C, D saved; one must go.
// LRU drops A (least recently used); s3fifo promoted A to its main queue
// on reuse and drops B, the oldest block of its small FIFO.
TEST_F(RuntimePolicyTest, S3FifoKeepsTheReusedBlockThatLruDrops) {
  for (const char* policy : {"lru", "s3fifo"}) {
    SCOPED_TRACE(policy);
    RuntimeOptions o = Options(4, {.high = 0.9, .low = 0.75});
    o.tiers[0].eviction = policy;
    Open(o);
    Save({1});
    clock_->Advance(kSecond);
    auto a = ChainKeys({1});
    ASSERT_TRUE(sim_->Load(a, 10).status().ok());
    for (uint64_t id : {2, 3, 4}) {
      clock_->Advance(kSecond);
      Save({id});
    }
    ASSERT_EQ(Move(), 1u);
    const bool lru = std::string(policy) == "lru";
    EXPECT_EQ(Stored({1}), !lru);
    EXPECT_EQ(Stored({2}), lru);
    EXPECT_TRUE(Stored({3}));
    EXPECT_TRUE(Stored({4}));
    rt_.reset();
  }
}

// B = {20, 21} then, a second later, A = {10, 11} are looked up and saved
// into a hub of 4 blocks with reuse eviction; one block must go. Without
// finish reports the order is rate / idle time, so B's older leaf goes.
// Once the engine reports A finished (Runtime::RequestFinished), B is a
// request still decoding whose blocks leave last, so A's leaf goes.
TEST_F(RuntimePolicyTest, ReuseEvictionKeepsUnfinishedRequestsOnceFinishesAreReported) {
  for (const bool report : {false, true}) {
    SCOPED_TRACE(report ? "A reported finished" : "no finish reports");
    RuntimeOptions o = Options(4, {.high = 0.9, .low = 0.75});
    o.tiers[0].eviction = "reuse";
    Open(o);
    const std::vector<uint64_t> a{10, 11}, b{20, 21};
    ASSERT_EQ(Hits(b), 0u);
    Save(b);
    clock_->Advance(kSecond);
    ASSERT_EQ(Hits(a), 0u);
    Save(a);
    if (report) rt_->RequestFinished(kTestNs, ChainKeys(a), 12);
    ASSERT_EQ(Move(), 1u);
    EXPECT_EQ(rt_->Stats().tiers[0].blocks, 3u);
    EXPECT_EQ(Stored({10, 11}), !report);
    EXPECT_EQ(Stored({20, 21}), report);
    rt_.reset();
  }
}

// A hub copy of a block the lower tier also holds (here: loaded back from
// it) is the first a `reuse` hub drops: no write, and the block is still
// found below. LRU drops the least recent block instead, writing it down.
TEST_F(RuntimePolicyTest, ReuseHubDropsCopiesALowerTierHoldsFirst) {
  for (const char* policy : {"reuse", "lru"}) {
    SCOPED_TRACE(policy);
    RuntimeOptions o = Options(4, {.high = 0.9, .low = 0.75});
    o.tiers[0].eviction = policy;
    AddLower(o, bb_);
    Open(o);
    for (uint64_t id : {1, 2, 3, 4}) {
      clock_->Advance(kSecond);
      Save({id});
    }
    ASSERT_EQ(Move(), 1u);  // the oldest, 1, goes down
    ASSERT_EQ(Where({1}), (std::vector<uint8_t>{1}));
    clock_->Advance(kSecond);
    ASSERT_TRUE(sim_->Load(ChainKeys({1}), 10).status().ok());  // the hub holds a copy again
    ASSERT_EQ(Move(), 1u);
    const bool reuse = std::string(policy) == "reuse";
    const uint8_t hub = 0, ssd = 1;
    EXPECT_EQ(Where({1}), (std::vector<uint8_t>{reuse ? ssd : hub}));
    EXPECT_EQ(Where({2}), (std::vector<uint8_t>{reuse ? hub : ssd}));
    EXPECT_EQ(rt_->Stats().tiers[1].blocks, reuse ? 1u : 2u);
    rt_.reset();
  }
}

// A save into a full hub makes room for the blocks it lacks, not for the
// ones stored already: {1..5} over a hub holding {1..4} demotes exactly one
// block, with the hub's admission skipped or asked (frequency, every key
// sighted once).
TEST_F(RuntimePolicyTest, SaveIntoAFullHubMakesRoomForItsNewBlocksOnly) {
  for (const bool bypass : {true, false}) {
    SCOPED_TRACE(bypass ? "admission skipped" : "admission asked");
    RuntimeOptions o = Options(4, {.high = 1.0, .low = 0.5});
    AddLower(o, bb_);
    if (!bypass) {
      o.tiers[0].admission = {"frequency"};
      o.tiers[0].policy.frequency_threshold = 1;
    }
    Open(o);
    const SaveOptions opts{.bypass_admission = bypass};
    EXPECT_EQ(Hits({1, 2, 3, 4, 5}), 0u);  // the sightings
    Save({1, 2, 3, 4}, opts);
    ASSERT_EQ(rt_->Stats().tiers[0].blocks, 4u);
    Completion c = Save({1, 2, 3, 4, 5}, opts);
    for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(c.result(i).ok()) << i;
    EXPECT_EQ(c.bytes(4), bb_);
    const RuntimeStats st = rt_->Stats();
    EXPECT_EQ(st.saved_blocks, 5u);
    EXPECT_EQ(st.save_duplicates, 4u);
    EXPECT_EQ(st.tiers[0].blocks, 4u);
    EXPECT_EQ(st.tiers[0].demoted_blocks, 1u);
    EXPECT_EQ(st.tiers[1].blocks, 1u);
    EXPECT_EQ(Hits({1, 2, 3, 4, 5}), 5u);
    rt_.reset();
  }
}

// A save under a parent that is not stored fails as a whole, so it makes no
// room: a full hub demotes nothing for it.
TEST_F(RuntimePolicyTest, SaveUnderAMissingParentDemotesNothing) {
  RuntimeOptions o = Options(4, {.high = 1.0, .low = 0.5});
  AddLower(o, bb_);
  Open(o);
  Save({1, 2, 3, 4});
  const std::vector<BlockKey> keys = ChainKeys({99, 100, 101});
  sim_->Prefill(keys, 0);
  const std::vector<BlockKey> child{keys[1], keys[2]};
  const std::vector<uint32_t> blocks{1, 2};
  Completion c = rt_->Save(kTestNs, keys[0], child, blocks, SaveOptions{});
  (void)c.Wait();
  EXPECT_EQ(c.result(0).code(), StatusCode::kInvalidArgument) << c.result(0).ToString();
  const RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[0].blocks, 4u);
  EXPECT_EQ(st.tiers[0].demoted_blocks, 0u);
  EXPECT_EQ(st.tiers[1].blocks, 0u);
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
