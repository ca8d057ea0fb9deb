// The runtime's eviction policies choosing victims among leaves (flop_aware,
// s3fifo, reuse with and without finish reports), and how much room a save
// into a full hub makes.
#include <gtest/gtest.h>

#include "tests/core/runtime_policy_fixture.h"

namespace kvtier::testing {
namespace {

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
    // Read out of the hub: the four blocks written down (no load ran), as
    // the lower tier counts what is read out of it.
    EXPECT_EQ(rt_->Stats().tiers[0].bytes_read, 4 * bb_);
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

}  // namespace
}  // namespace kvtier::testing
