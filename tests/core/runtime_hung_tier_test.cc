// A lower tier that stops answering (a hung device or server) while a load or
// a save has to make room in a full hub by writing hub blocks down, or while
// blocks are removed: the call still ends by its deadline, the tier call
// goes on without it, and once the tier answers its blocks are indexed where
// they are (or gone, when removed), none lost and none wrong.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/fault_tier.h"
#include "tests/support/returns_within.h"

namespace kvtier::testing {
namespace {

constexpr std::chrono::seconds kHangLimit(20);  // far past any deadline below

class RuntimeHungTierTest : public ::testing::Test {
 protected:
  // Hub of 4 blocks over a `faulty` tier 1 of `tier1_blocks` whose reads
  // and writes stall on demand, with a host tier 2 below it when
  // `tier1_blocks` is small enough to need one.
  void Open(uint64_t tier1_blocks, bool with_tier2) {
    setup_ = MakeEngine(64);
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 4);
    o.mover.batch_blocks = 1;
    o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
    o.tiers.push_back(LowerHostTier("faulty", bb, tier1_blocks));
    o.tiers.back().watermarks = {.high = 1.0, .low = 0.9};  // the mover leaves it be
    if (with_tier2) o.tiers.push_back(LowerHostTier("below", bb, 32));
    FaultOptions f;
    f.stall_reads = reads_;
    f.stall_writes = writes_;
    f.stall_removes = removes_;
    o.tier_factory = FaultyTierFactory("faulty", f);
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }

  void TearDown() override {
    // A held call would hold up the tier's Shutdown.
    reads_->Release();
    writes_->Release();
    removes_->Release();
  }

  // A1..A4 saved and demoted (A1 stays in the hub, A2..A4 go to tier 1),
  // then B1..B3 saved: the hub is full.
  void FillHub() {
    a_ = ChainKeys({1, 2, 3, 4});
    sim_->Prefill(a_, 0);
    ASSERT_TRUE(sim_->SaveFrom(a_, 0, 0).status().ok());
    ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
    b_ = ChainKeys({20, 21, 22});
    sim_->Prefill(b_, 10);
    ASSERT_TRUE(sim_->SaveFrom(b_, 0, 10).status().ok());
    ASSERT_EQ(rt_->Lookup(kTestNs, a_)->hit_blocks, 4u);
    ASSERT_EQ(rt_->Lookup(kTestNs, b_)->hit_blocks, 3u);
    ASSERT_EQ(rt_->Stats().tiers[0].blocks, 4u);
  }

  // Loads `keys` into engine blocks 30.. with `timeout`; fails the test at
  // once (ReturnsWithin) if the load is still held long past it.
  Completion LoadWithin(const std::vector<BlockKey>& keys, std::chrono::milliseconds timeout) {
    sim_->Scrub(0, 64);
    Completion c;
    EXPECT_TRUE(ReturnsWithin([&] { c = sim_->Load(keys, 30, timeout); }, kHangLimit,
                              "a load while the tier below is hung"));
    return c;
  }

  // Saves a new block C (engine block 40) into the full hub; fails the test
  // at once if the save is held long past its bounded wait for room, and
  // expects C refused for want of room.
  void SaveCWhileHung() {
    c_ = ChainKeys({40});
    sim_->Prefill(c_, 40);
    Completion c;
    EXPECT_TRUE(ReturnsWithin([&] { c = sim_->SaveFrom(c_, 0, 40); }, kHangLimit,
                              "a save while the tier below is hung"));
    EXPECT_EQ(c.result(0).code(), StatusCode::kResourceExhausted) << c.result(0).ToString();
    EXPECT_EQ(rt_->Lookup(kTestNs, c_)->hit_blocks, 0u);
  }

  // Every key of `keys` is found and loads byte for byte.
  void ExpectWhole(const std::vector<BlockKey>& keys) {
    EXPECT_EQ(rt_->Lookup(kTestNs, keys)->hit_blocks, keys.size());
    Completion c = LoadWithin(keys, std::chrono::seconds(10));
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_TRUE(c.result(i).ok()) << i << ": " << c.result(i).ToString();
      EXPECT_TRUE(sim_->Holds(30 + static_cast<uint32_t>(i), keys[i])) << i;
    }
  }

  std::shared_ptr<CallStall> reads_ = std::make_shared<CallStall>();
  std::shared_ptr<CallStall> writes_ = std::make_shared<CallStall>();
  std::shared_ptr<CallStall> removes_ = std::make_shared<CallStall>();
  EngineSetup setup_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  std::vector<BlockKey> a_, b_, c_;
};

// The load needs 3 hub slots for A2..A4; the hub's leaf B3 is written down
// to make room and that write never answers. The load ends past its 200 ms
// deadline with the blocks it could not stage DeadlineExceeded (this call
// used to wait for the write, for good). Once the tier answers, B3 is held
// in both tiers and nothing is lost.
TEST_F(RuntimeHungTierTest, ALoadIsNotHeldByAHungDemotionWrite) {
  Open(32, /*with_tier2=*/false);
  FillHub();
  writes_->Stall();
  Completion c = LoadWithin(a_, std::chrono::milliseconds(200));
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  EXPECT_TRUE(sim_->Holds(30, a_[0]));
  for (size_t i = 1; i < a_.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kDeadlineExceeded)
        << i << ": " << c.result(i).ToString();
  }
  EXPECT_EQ(writes_->held(), 1u);
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 4u) << "the block being written left the hub";

  writes_->Release();  // the write ends here and settles its victim
  const RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[0].demoted_blocks, 4u) << "A2..A4, then B3";
  EXPECT_EQ(st.tiers[1].blocks, 4u);
  EXPECT_EQ(st.tiers[0].blocks, 4u) << "B3's hub copy stays, backed by tier 1";
  ExpectWhole(a_);
  ExpectWhole(b_);
}

// Saves of new blocks into the full hub each hold a worker for their bounded
// wait for room while the write that would make it hangs. A load of a block
// in the hub, submitted after them, used to queue behind them all (2 s past
// its 50 ms timeout with four saves, 0.5 s more per save): loads now go
// first, and saves leave a worker free for them.
TEST_F(RuntimeHungTierTest, ALoadIsNotQueuedBehindSavesWaitingForRoom) {
  Open(32, /*with_tier2=*/false);
  FillHub();
  writes_->Stall();
  std::vector<Completion> saves;
  for (uint32_t i = 0; i < 4; ++i) {
    const std::vector<BlockKey> keys = ChainKeys({100 + i});
    sim_->Prefill(keys, 40 + i);
    const uint32_t block = 40 + i;
    saves.push_back(rt_->Save(kTestNs, std::nullopt, keys, std::span(&block, 1)));
  }
  const auto start = std::chrono::steady_clock::now();
  Completion c = LoadWithin({a_[0]}, std::chrono::milliseconds(50));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  EXPECT_TRUE(sim_->Holds(30, a_[0]));
  // Far below one save's wait for room (a second), far above any scheduling.
  EXPECT_LT(took, std::chrono::milliseconds(900));
  writes_->Release();  // the saves still waiting for room may now get it
  for (Completion& save : saves) {
    EXPECT_TRUE(ReturnsWithin([&] { (void)save.Wait(); }, kHangLimit, "a save"));
    const StatusCode code = save.result(0).code();
    EXPECT_TRUE(code == StatusCode::kOk || code == StatusCode::kResourceExhausted)
        << save.result(0).ToString();
  }
  ExpectWhole(a_);
  ExpectWhole(b_);
}

// The same for a save of a new block into the full hub: it waits for room
// for its bounded second, not for the hung write, and fails that block;
// saved again once the tier answers, it is stored.
TEST_F(RuntimeHungTierTest, ASaveIsNotHeldByAHungDemotionWrite) {
  Open(32, /*with_tier2=*/false);
  FillHub();
  writes_->Stall();
  SaveCWhileHung();
  EXPECT_EQ(writes_->held(), 1u);

  writes_->Release();
  ASSERT_TRUE(sim_->SaveFrom(c_, 0, 40).status().ok());
  ExpectWhole(c_);
  ExpectWhole(a_);
  ExpectWhole(b_);
}

// Once a write to the tier has gone past its caller's deadline, demotions
// stop writing to that tier until it answers: a leaf leaves the hub at once
// (lost, as a block its tier refuses), so each later save finds room. Before,
// every save wrote its victim to the hung tier too, waited its second for
// room and failed, for as long as the tier hung (a Redis server stopped).
TEST_F(RuntimeHungTierTest, SavesAfterAHungWriteDoNotWaitOnTheTier) {
  Open(32, /*with_tier2=*/false);
  b_ = ChainKeys({20, 21, 22});
  sim_->Prefill(b_, 10);
  ASSERT_TRUE(sim_->SaveFrom(b_, 0, 10).status().ok());
  const auto c = ChainKeys({30});
  sim_->Prefill(c, 20);
  ASSERT_TRUE(sim_->SaveFrom(c, 0, 20).status().ok());
  ASSERT_EQ(rt_->Stats().tiers[0].blocks, 4u);
  writes_->Stall();

  // B3, the least recent leaf, is written down and hangs.
  const auto d = ChainKeys({40});
  sim_->Prefill(d, 40);
  Completion first;
  EXPECT_TRUE(ReturnsWithin([&] { first = sim_->SaveFrom(d, 0, 40); }, kHangLimit, "a save"));
  EXPECT_EQ(writes_->held(), 1u);
  for (uint64_t id : {50, 51, 52}) {
    const auto e = ChainKeys({id});
    sim_->Prefill(e, 50);
    Completion next;
    EXPECT_TRUE(ReturnsWithin([&] { next = sim_->SaveFrom(e, 0, 50); }, kHangLimit, "a save"));
    EXPECT_TRUE(next.status().ok()) << id << ": " << next.status().ToString();
    EXPECT_EQ(rt_->Lookup(kTestNs, e)->hit_blocks, 1u) << id;
  }
  EXPECT_EQ(writes_->held(), 1u) << "no other write was sent to the hung tier";

  writes_->Release();  // B3's write ends: it is held below, B is whole
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 1u);
  ExpectWhole(b_);
}

// Tier 1 is full (A2..A4), so saving a new block C into the full hub writes
// B3 down, which first demotes A4 from tier 1 to tier 2, and reading A4
// back from tier 1 never answers. The save ends after its bounded wait with
// nothing moved; the read, let go later, lands in buffers it still owns
// (AddressSanitizer would see them freed). Saved again, C goes in and
// every block is still found.
TEST_F(RuntimeHungTierTest, ASaveIsNotHeldByAHungReadOfTheCascadeBelow) {
  Open(3, /*with_tier2=*/true);
  FillHub();
  reads_->Stall();
  SaveCWhileHung();
  EXPECT_EQ(reads_->held(), 1u);

  reads_->Release();
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[0].blocks, 4u);
  EXPECT_EQ(st.tiers[1].blocks, 3u);
  EXPECT_EQ(st.tiers[2].blocks, 0u);
  EXPECT_EQ(st.tiers[1].demoted_blocks, 0u);
  EXPECT_EQ(rt_->Lookup(kTestNs, a_)->hit_blocks, 4u);
  ExpectWhole(b_);

  sim_->Prefill(c_, 40);  // ExpectWhole scrubbed the engine's blocks
  ASSERT_TRUE(sim_->SaveFrom(c_, 0, 40).status().ok());
  st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].demoted_blocks, 1u) << "A4 to tier 2";
  EXPECT_EQ(st.tiers[2].blocks, 1u);
  EXPECT_EQ(rt_->Lookup(kTestNs, a_)->hit_blocks, 4u);
  EXPECT_EQ(rt_->Lookup(kTestNs, b_)->hit_blocks, 3u);
  ExpectWhole(c_);
}

// Remove drops A3..A4 from the index at once and asks tier 1, which never
// answers: the call ends after its bounded wait with DeadlineExceeded
// naming the tier (it used to wait for good). The copies are not found
// meanwhile, and go when the tier answers.
TEST_F(RuntimeHungTierTest, ARemoveIsNotHeldByAHungTier) {
  Open(32, /*with_tier2=*/false);
  FillHub();
  ASSERT_EQ(rt_->Stats().tiers[1].blocks, 3u);
  removes_->Stall();
  const std::vector<BlockKey> tail(a_.begin() + 2, a_.end());
  Status st;
  EXPECT_TRUE(ReturnsWithin([&] { st = rt_->Remove(kTestNs, tail); }, kHangLimit,
                            "a remove while the tier below is hung"));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("'faulty'"), std::string::npos) << st.ToString();
  EXPECT_EQ(removes_->held(), 1u);
  EXPECT_EQ(rt_->Lookup(kTestNs, a_)->hit_blocks, 2u);
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 3u) << "the tier has not dropped them yet";

  removes_->Release();
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 1u);
  EXPECT_EQ(rt_->Lookup(kTestNs, a_)->hit_blocks, 2u);
  ExpectWhole({a_[0], a_[1]});
  ExpectWhole(b_);
  // Answered at once, the same call reports success.
  ASSERT_TRUE(rt_->Remove(kTestNs, b_).ok());
  EXPECT_EQ(rt_->Lookup(kTestNs, b_)->hit_blocks, 0u);
}

}  // namespace
}  // namespace kvtier::testing
