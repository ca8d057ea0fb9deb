// Faults a lower tier shows to the mover: a copy read back wrong while it
// is demoted further is never written below (nor counted a success), and a
// Remove that fails is retried until the tier has let the copy go.
#include <gtest/gtest.h>

#include "tests/core/runtime_test_util.h"
#include "tests/support/fault_tier.h"

namespace kvtier::testing {
namespace {

class RuntimeDemoteFaultTest : public ::testing::Test {
 protected:
  // Hub of 4 blocks (low mark 1) over a faulty tier 1 of `tier1_blocks`
  // with the given watermarks, and, when `with_tier2`, a host tier 2 below.
  void Open(FaultOptions faults, uint64_t tier1_blocks, WatermarkOptions tier1_marks,
            bool with_tier2) {
    setup_ = MakeEngine(64);
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 4);
    o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
    o.tiers.push_back(LowerHostTier("faulty", bb, tier1_blocks));
    o.tiers.back().watermarks = tier1_marks;
    if (with_tier2) o.tiers.push_back(LowerHostTier("below", bb, 32));
    o.tier_factory = FaultyTierFactory("faulty", faults);
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }

  // Saves K1..K4 and runs one mover pass: the hub keeps K1 and sends K2..K4
  // to tier 1, which (over its high mark) sends them on to tier 2, reading
  // each back through the fault.
  void DemoteThroughFaultyTier(FaultOptions faults) {
    Open(faults, 8, {.high = 0.2, .low = 0.1}, /*with_tier2=*/true);
    keys_ = ChainKeys({1, 2, 3, 4});
    sim_->Prefill(keys_, 0);
    ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
    ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  }

  // What a demotion whose reads all came back wrong must leave: nothing
  // written below, the copies counted corrupt, forgotten and removed, and
  // no load returning bytes other than the block's.
  void ExpectBadReadsWroteNothing() {
    const RuntimeStats st = rt_->Stats();
    EXPECT_EQ(st.tiers[2].blocks, 0u) << "bytes of a bad read were written below";
    EXPECT_EQ(st.tiers[1].demoted_blocks, 0u);
    EXPECT_EQ(st.tiers[1].corruptions, 3u);
    EXPECT_EQ(st.tiers[1].blocks, 0u) << "corrupt copies are removed from the tier";
    EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 1u);
    sim_->Scrub(0, 64);
    Completion c = sim_->Load(keys_, 8);
    EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
    EXPECT_TRUE(sim_->Holds(8, keys_[0]));
    for (size_t i = 1; i < keys_.size(); ++i) {
      EXPECT_FALSE(c.result(i).ok()) << i;
      if (c.result(i).ok()) EXPECT_TRUE(sim_->Holds(8 + static_cast<uint32_t>(i), keys_[i]));
    }
  }

  EngineSetup setup_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  std::vector<BlockKey> keys_;
};

// Tier 1 answers OK with one byte short: the rest of the staging buffer
// (zeroes for a really short read) must not reach tier 2 as the block.
TEST_F(RuntimeDemoteFaultTest, ShortReadWhileDemotingIsCorruptionAndWritesNothing) {
  FaultOptions f;
  f.truncate_on_read = true;
  DemoteThroughFaultyTier(f);
  ExpectBadReadsWroteNothing();
}

// Tier 1 answers OK with a flipped byte: the block's checksum (taken when it
// left the hub) catches it before tier 2 stores it.
TEST_F(RuntimeDemoteFaultTest, ChecksumMismatchWhileDemotingIsCorruptionAndWritesNothing) {
  FaultOptions f;
  f.corrupt_on_read = true;
  DemoteThroughFaultyTier(f);
  ExpectBadReadsWroteNothing();
}

// Tier 1 (the last) drops K4 and K3 while it cannot remove them. They stay
// stored there, taking room the index no longer counts, until the next
// mover pass retries the removes.
TEST_F(RuntimeDemoteFaultTest, FailedRemovesAreRetriedByTheNextPass) {
  FaultOptions f;
  f.fail_removes = 2;
  f.error = StatusCode::kUnavailable;
  Open(f, 4, {.high = 0.5, .low = 0.25}, /*with_tier2=*/false);
  keys_ = ChainKeys({1, 2, 3, 4});
  sim_->Prefill(keys_, 0);
  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_->Lookup(kTestNs, keys_)->tier, (std::vector<uint8_t>{0, 1}));
  ASSERT_EQ(rt_->Stats().tiers[1].blocks, 3u) << "the removes were meant to fail";

  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 1u) << "the failed removes were not retried";
  // With its room back, the tier is under its high mark: K2 stays.
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->tier, (std::vector<uint8_t>{0, 1}));
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(std::vector<BlockKey>(keys_.begin(), keys_.begin() + 2), 8);
  EXPECT_TRUE(c.result(1).ok()) << c.result(1).ToString();
  EXPECT_TRUE(sim_->Holds(9, keys_[1]));
}

// A tier with a local index still holds K3 and K4, whose removes failed: a
// lookup must not adopt them back, or the retry would then delete blocks
// the index lists.
TEST_F(RuntimeDemoteFaultTest, CopiesWaitingForTheirRemoveAreNotAdopted) {
  FaultOptions f;
  f.fail_removes = 2;
  f.error = StatusCode::kUnavailable;
  f.local_index = true;
  Open(f, 4, {.high = 0.5, .low = 0.25}, /*with_tier2=*/false);
  keys_ = ChainKeys({1, 2, 3, 4});
  sim_->Prefill(keys_, 0);
  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_->Stats().tiers[1].blocks, 3u) << "the removes were meant to fail";
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->tier, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(rt_->Stats().adopted_blocks, 0u);
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 1u);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys_, 8);
  EXPECT_TRUE(c.result(0).ok() && c.result(1).ok()) << c.result(1).ToString();
  EXPECT_EQ(c.result(2).code(), StatusCode::kNotFound) << c.result(2).ToString();
}

// A load finds K2..K4 corrupt; the removes of the corrupt copies fail, and
// the next mover pass retries them.
TEST_F(RuntimeDemoteFaultTest, FailedRemovesOfCorruptCopiesAreRetried) {
  FaultOptions f;
  f.corrupt_on_read = true;
  f.fail_removes = 3;
  f.error = StatusCode::kUnavailable;
  Open(f, 32, {.high = 0.9, .low = 0.8}, /*with_tier2=*/false);
  keys_ = ChainKeys({1, 2, 3, 4});
  sim_->Prefill(keys_, 0);
  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_->Stats().tiers[1].blocks, 3u);
  Completion c = sim_->Load(keys_, 8);
  for (size_t i = 1; i < keys_.size(); ++i)
    EXPECT_EQ(c.result(i).code(), StatusCode::kCorruption) << i;
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 3u) << "the removes were meant to fail";
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 0u) << "the failed removes were not retried";
}

// Writing a key to a tier again replaces the copy whose Remove failed there:
// the retry must not then delete the new copy. Tier 1 (the last) drops
// K2..K4 while it cannot remove them; K2..K4 are saved again, and a save
// that needs room writes K4 to tier 1 before any mover pass has retried.
TEST_F(RuntimeDemoteFaultTest, AKeyWrittenAgainIsNotRemovedByTheRetry) {
  FaultOptions f;
  f.fail_removes = 3;
  f.error = StatusCode::kUnavailable;
  Open(f, 4, {.high = 0.5, .low = 0.2}, /*with_tier2=*/false);
  keys_ = ChainKeys({1, 2, 3, 4});
  sim_->Prefill(keys_, 0);
  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 1u);
  ASSERT_EQ(rt_->Stats().tiers[1].blocks, 3u) << "the removes were meant to fail";

  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());  // the hub: K1..K4, full
  const auto y = ChainKeys({9});
  sim_->Prefill(y, 10);
  ASSERT_TRUE(sim_->SaveFrom(y, 0, 10).status().ok());
  ASSERT_EQ(rt_->Lookup(kTestNs, keys_)->tier, (std::vector<uint8_t>{0, 0, 0, 1}));
  ASSERT_TRUE(rt_->Remove(kTestNs, y).ok());  // the hub back under its high mark

  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());  // retries the removes of K2 and K3
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 1u);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(std::vector<BlockKey>{keys_[3]}, 8);
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  EXPECT_TRUE(sim_->Holds(8, keys_[3]));
}

// A public Remove whose removes in tier 1 (with a local index) fail: it
// reports the failure, the copies left there are not adopted back by a
// lookup, and the next mover pass retries the removes until they are gone.
TEST_F(RuntimeDemoteFaultTest, FailedRemovesOfARemoveCallAreRetriedAndNotAdopted) {
  FaultOptions f;
  f.fail_removes = 3;
  f.error = StatusCode::kUnavailable;
  f.local_index = true;
  Open(f, 32, {.high = 0.9, .low = 0.8}, /*with_tier2=*/false);
  keys_ = ChainKeys({1, 2, 3, 4});
  sim_->Prefill(keys_, 0);
  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_->Lookup(kTestNs, keys_)->tier, (std::vector<uint8_t>{0, 1, 1, 1}));

  const Status removed = rt_->Remove(kTestNs, keys_);
  EXPECT_EQ(removed.code(), StatusCode::kUnavailable) << removed.ToString();
  ASSERT_GT(rt_->Stats().tiers[1].blocks, 0u) << "the removes were meant to fail";
  const std::vector<BlockKey> tail(keys_.begin() + 1, keys_.end());  // what tier 1 holds
  EXPECT_EQ(rt_->Lookup(kTestNs, tail)->hit_blocks, 0u) << "removed blocks adopted back";

  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 0u) << "the failed removes were not retried";
  EXPECT_EQ(rt_->Lookup(kTestNs, tail)->hit_blocks, 0u);
  EXPECT_EQ(rt_->Stats().adopted_blocks, 0u);
}

// Tier 1's copies of K2..K4 fail every read with an I/O error (a bad
// sector): they were kept for a later pass, and every pass chose them
// again first, so tier 1 stayed above its watermark for good. After three
// failed moves in a row each is given up, as a corrupt copy is, and its
// room is given back below.
TEST_F(RuntimeDemoteFaultTest, CopiesThatNeverReadAreGivenUpAfterThreePasses) {
  FaultOptions f;
  const std::vector<BlockKey> keys = ChainKeys({1, 2, 3, 4});
  f.unreadable = {keys.begin() + 1, keys.end()};
  DemoteThroughFaultyTier(f);  // the first pass: K2..K4 to tier 1, their reads fail
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 3u) << "a read that failed twice is tried again";
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  const RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].blocks, 0u) << "the unreadable copies kept tier 1 above its watermark";
  EXPECT_EQ(st.tiers[2].blocks, 0u);
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 1u);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys_, 8);
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  EXPECT_TRUE(sim_->Holds(8, keys_[0]));
}

}  // namespace
}  // namespace kvtier::testing
