// Saves of overlapping chains: a key another Save is still copying is not
// answered as stored until that copy has ended, and a copy that fails is
// made again from the waiting Save's own engine block.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/runtime_impl.h"
#include "tests/core/gated_copy_engine.h"
#include "tests/core/gated_runtime.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

class SaveOverlapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_ = MakeEngine(64);
    ASSERT_TRUE(setup_.engine);
    engine_ = std::make_shared<GatedCopyEngine>(setup_.engine);
    auto rt = Runtime::Open(MakeOptions(setup_.layout.BlockBytes(), 8), engine_);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  // A held Gather must end before the runtime's workers are joined.
  void TearDown() override {
    if (engine_) engine_->Release(/*fail=*/true);
    if (engine_) engine_->ReleaseScatter();
    rt_.reset();
  }
  // Stores keys_ (from engine blocks 0..) and writes another key's block
  // into engine block 5; returns that key's chain.
  std::vector<BlockKey> StoreChainThenFillBlock5() {
    sim_->Prefill(keys_, 0);
    EXPECT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
    const std::vector<BlockKey> other = ChainKeys({7});
    sim_->Prefill(other, 5);
    return other;
  }
  // Saves keys[0] alone with its Gather held (request B), then the chain
  // keys[0..2) (request A) as a preemption victim's save would be.
  void StartOverlappingSaves() {
    sim_->Prefill(keys_, 0);
    engine_->HoldNextGather();
    const std::vector<uint32_t> b_block{0};
    b_ = rt_->Save(kTestNs, std::nullopt, std::span(keys_).first(1), b_block);
    ASSERT_TRUE(engine_->WaitHeld());
    const std::vector<uint32_t> a_blocks{0, 1};
    a_ = rt_->Save(kTestNs, std::nullopt, keys_, a_blocks, {.bypass_admission = true});
  }

  // Saves keys[0] alone with its Gather held (request B), then keys[1]
  // under it as its parent (request A).
  void StartSaveUnderAParentBeingCopied() {
    sim_->Prefill(keys_, 0);
    engine_->HoldNextGather();
    const std::vector<uint32_t> b_block{0};
    b_ = rt_->Save(kTestNs, std::nullopt, std::span(keys_).first(1), b_block);
    ASSERT_TRUE(engine_->WaitHeld());
    const std::vector<uint32_t> a_block{1};
    a_ = rt_->Save(kTestNs, keys_[0], std::span(keys_).subspan(1), a_block);
  }

  const std::vector<BlockKey> keys_ = ChainKeys({1, 2});
  EngineSetup setup_;
  std::shared_ptr<GatedCopyEngine> engine_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  Completion a_, b_;
};

// B's copy of keys[0] fails after A began: A stored both blocks itself, so
// the engine may free them once A completes (IsSaved agrees).
TEST_F(SaveOverlapTest, ASaveWaitsForAnotherSavesCopyAndRedoesItWhenItFails) {
  StartOverlappingSaves();
  (void)a_.WaitFor(std::chrono::milliseconds(300));
  EXPECT_FALSE(a_.Poll()) << "A answered before B's copy of its first block had ended";
  engine_->Release(/*fail=*/true);
  (void)b_.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(b_.Poll());
  EXPECT_EQ(b_.result(0).code(), StatusCode::kIOError) << b_.result(0).ToString();
  ASSERT_TRUE(a_.WaitFor(std::chrono::seconds(5)).ok()) << a_.status().ToString();
  EXPECT_TRUE(rt_->IsSaved(kTestNs, keys_));
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 2u);
  sim_->Scrub(0, 64);
  ASSERT_TRUE(sim_->Load(keys_, 10).status().ok());
  for (uint32_t i = 0; i < keys_.size(); ++i) EXPECT_TRUE(sim_->Holds(10 + i, keys_[i])) << i;
}

// B's copy succeeds: A takes keys[0] as stored and copies only keys[1].
TEST_F(SaveOverlapTest, ASaveWaitingForAnotherSavesCopyTakesWhatItStored) {
  StartOverlappingSaves();
  engine_->Release(/*fail=*/false);
  ASSERT_TRUE(b_.WaitFor(std::chrono::seconds(5)).ok()) << b_.status().ToString();
  ASSERT_TRUE(a_.WaitFor(std::chrono::seconds(5)).ok()) << a_.status().ToString();
  EXPECT_TRUE(rt_->IsSaved(kTestNs, keys_));
  const RuntimeStats s = rt_->Stats();
  EXPECT_EQ(s.saved_blocks, 2u) << "no block copied twice";
  EXPECT_EQ(s.save_duplicates, 1u);
}

// B's copy outlasts A's wait: A fails its keys from keys[0] on, rather than
// answering OK for blocks that may never be stored.
TEST_F(SaveOverlapTest, ASaveFailsKeysAnotherSaveIsStillCopyingAfterItsWait) {
  StartOverlappingSaves();
  (void)a_.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(a_.Poll()) << "A did not give up waiting";
  for (size_t i = 0; i < keys_.size(); ++i) {
    EXPECT_EQ(a_.result(i).code(), StatusCode::kDeadlineExceeded) << i;
    EXPECT_NE(a_.result(i).message().find("is still being copied by another save"),
              std::string::npos)
        << a_.result(i).ToString();
  }
  engine_->Release(/*fail=*/false);
  ASSERT_TRUE(b_.WaitFor(std::chrono::seconds(5)).ok()) << b_.status().ToString();
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 1u);
}

// A parent another save is copying is waited for like a key: once its copy
// is made the child is stored under it.
TEST_F(SaveOverlapTest, ASaveUnderAParentBeingCopiedWaitsAndStoresTheChild) {
  StartSaveUnderAParentBeingCopied();
  (void)a_.WaitFor(std::chrono::milliseconds(300));
  EXPECT_FALSE(a_.Poll()) << "A answered before its parent's copy had ended";
  engine_->Release(/*fail=*/false);
  ASSERT_TRUE(b_.WaitFor(std::chrono::seconds(5)).ok()) << b_.status().ToString();
  ASSERT_TRUE(a_.WaitFor(std::chrono::seconds(5)).ok()) << a_.status().ToString();
  EXPECT_TRUE(rt_->IsSaved(kTestNs, keys_));
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 2u);
}

// The parent's copy fails within the wait: the child has nothing to hang
// off, and says so, instead of OK for a block no lookup reaches.
TEST_F(SaveOverlapTest, ASaveUnderAParentWhoseCopyFailsFailsToo) {
  StartSaveUnderAParentBeingCopied();
  engine_->Release(/*fail=*/true);
  (void)b_.WaitFor(std::chrono::seconds(5));
  (void)a_.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(a_.Poll());
  EXPECT_EQ(a_.result(0).code(), StatusCode::kInvalidArgument) << a_.result(0).ToString();
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 0u);
}

// The parent's copy outlasts the wait: the child fails DeadlineExceeded. It
// used to be stored under the parent and answered OK; the parent's copy then
// failed, leaving it where no lookup reaches it.
TEST_F(SaveOverlapTest, ASaveUnderAParentStillBeingCopiedAfterItsWaitFails) {
  StartSaveUnderAParentBeingCopied();
  (void)a_.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(a_.Poll()) << "A did not give up waiting";
  EXPECT_EQ(a_.result(0).code(), StatusCode::kDeadlineExceeded) << a_.result(0).ToString();
  EXPECT_NE(a_.result(0).message().find("parent block"), std::string::npos)
      << a_.result(0).ToString();
  engine_->Release(/*fail=*/true);
  (void)b_.WaitFor(std::chrono::seconds(5));
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 0u);
  EXPECT_FALSE(rt_->IsSaved(kTestNs, std::span(keys_).first(1)));
}

// The parent's copy ends just after the wait, between the child's admission
// (which stopped at the parent, asking nothing) and its reservation: the
// child fails as in the test above. It used to be answered OK, counted as
// not admitted, and not stored.
TEST_F(SaveOverlapTest, ASaveWhoseParentIsStoredJustAfterItsAdmissionFailsTheChild) {
  std::atomic<bool> released{false};
  // B's own admission comes before its copy is held, and is let pass.
  static_cast<internal::RuntimeImpl*>(rt_.get())->TEST_SetAfterSaveAdmission([&] {
    if (!engine_->Held() || released.exchange(true)) return;
    engine_->Release(/*fail=*/false);
    (void)b_.WaitFor(std::chrono::seconds(5));
  });
  StartSaveUnderAParentBeingCopied();
  (void)a_.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(a_.Poll()) << "A did not answer";
  ASSERT_TRUE(released.load());
  ASSERT_TRUE(b_.Poll() && b_.status().ok()) << b_.status().ToString();
  const size_t stored = rt_->Lookup(kTestNs, keys_)->hit_blocks;
  EXPECT_EQ(a_.result(0).ok(), stored == 2u)
      << a_.result(0).ToString() << " with " << stored << " blocks stored";
  EXPECT_EQ(a_.result(0).code(), StatusCode::kDeadlineExceeded) << a_.result(0).ToString();
  EXPECT_EQ(rt_->Stats().save_not_admitted, 0u);
}

// A save whose job throws before it reserves anything (a policy, or memory
// running out): its blocks are counted as asked for as well as failed. The
// failures used to outnumber the blocks asked for.
TEST_F(SaveOverlapTest, ASaveThatThrowsEarlyCountsItsBlocksAsAskedFor) {
  static_cast<internal::RuntimeImpl*>(rt_.get())->TEST_SetAfterSaveAdmission(
      [] { throw std::runtime_error("admission broke"); });
  const RuntimeStats before = rt_->Stats();
  const auto keys = ChainKeys({70, 71});
  const std::vector<uint32_t> from{0, 1};
  Completion save = rt_->Save(kTestNs, std::nullopt, keys, from);
  (void)save.Wait();
  EXPECT_EQ(save.result(0).code(), StatusCode::kInternal) << save.result(0).ToString();
  const RuntimeStats after = rt_->Stats();
  EXPECT_EQ(after.save_failures - before.save_failures, 2u);
  EXPECT_EQ(after.save_blocks - before.save_blocks, 2u);
}

// A load into an engine block a save is still copying from would be served
// first (loads go ahead of queued saves) and the save would store the
// loaded bytes under its own key: such a load is refused until the save ends.
TEST_F(SaveOverlapTest, ALoadIntoABlockStillBeingSavedIsRefused) {
  const std::vector<BlockKey> other = StoreChainThenFillBlock5();
  engine_->HoldNextGather();
  const std::vector<uint32_t> from{5};
  Completion save = rt_->Save(kTestNs, std::nullopt, other, from);
  ASSERT_TRUE(engine_->WaitHeld());

  const std::vector<BlockKey> first(keys_.begin(), keys_.begin() + 1);
  Completion refused = rt_->Load(kTestNs, first, from, std::chrono::seconds(5));
  ASSERT_TRUE(refused.Poll());
  EXPECT_EQ(refused.result(0).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.result(0).message().find("engine block 5 is still being saved"),
            std::string::npos)
      << refused.result(0).ToString();
  EXPECT_TRUE(sim_->Holds(5, other[0])) << "the refused load wrote the block";
  const std::vector<uint32_t> elsewhere{6};
  EXPECT_TRUE(rt_->Load(kTestNs, first, elsewhere, std::chrono::seconds(5)).Wait().ok());

  engine_->Release(/*fail=*/false);
  ASSERT_TRUE(save.Wait().ok()) << save.status().ToString();
  EXPECT_TRUE(sim_->Load(first, 5).status().ok()) << "still refused after the save ended";
  EXPECT_TRUE(sim_->Holds(5, keys_[0]));
  EXPECT_TRUE(sim_->Load(other, 9).status().ok());
  EXPECT_TRUE(sim_->Holds(9, other[0])) << "the save stored other bytes than its block's";
}

// A load into an engine block that arrives just as a save from the block
// has marked it, before the save checks for loads: the load is refused and
// the save stores the block's own bytes. (Had each checked the other before
// marking its own, both would have gone ahead.)
TEST_F(SaveOverlapTest, ALoadArrivingAsASaveMarksItsBlockIsRefused) {
  const std::vector<BlockKey> other = StoreChainThenFillBlock5();
  const std::vector<BlockKey> first(keys_.begin(), keys_.begin() + 1);
  const std::vector<uint32_t> block{5};
  std::optional<Completion> load;
  auto* impl = static_cast<internal::RuntimeImpl*>(rt_.get());
  impl->TEST_SetAfterSaveMarked([&] {
    if (!load) load = rt_->Load(kTestNs, first, block, std::chrono::seconds(5));
  });
  Completion save = rt_->Save(kTestNs, std::nullopt, other, block);
  ASSERT_TRUE(load.has_value()) << "the hook did not run";
  ASSERT_TRUE(save.Wait().ok()) << save.status().ToString();
  (void)load->Wait();
  EXPECT_EQ(load->result(0).code(), StatusCode::kInvalidArgument) << load->result(0).ToString();
  EXPECT_NE(load->result(0).message().find("engine block 5 is still being saved"),
            std::string::npos)
      << load->result(0).ToString();
  EXPECT_TRUE(sim_->Load(other, 9).status().ok());
  EXPECT_TRUE(sim_->Holds(9, other[0])) << "the save stored other bytes than its block's";
}

// Out of memory between marking a save's engine blocks and its check for
// loads (whose refusal builds a message): the save is refused, and its
// marks go with it. Left, every later load into the block would have been
// refused as overtaking a save.
TEST_F(SaveOverlapTest, ASaveOutOfMemoryAfterMarkingItsBlocksLeavesNoMark) {
  const std::vector<BlockKey> other = StoreChainThenFillBlock5();
  auto* impl = static_cast<internal::RuntimeImpl*>(rt_.get());
  impl->TEST_SetAfterSaveMarked([] { throw std::bad_alloc(); });
  const std::vector<uint32_t> block{5};
  Completion save = rt_->Save(kTestNs, std::nullopt, other, block);
  impl->TEST_SetAfterSaveMarked(nullptr);
  EXPECT_EQ(save.Wait().code(), StatusCode::kResourceExhausted) << save.status().ToString();
  const std::vector<BlockKey> first(keys_.begin(), keys_.begin() + 1);
  EXPECT_TRUE(sim_->Load(first, 5).status().ok()) << "the refused save's mark stayed";
  EXPECT_TRUE(sim_->Holds(5, keys_[0]));
}

// A load still copying into an engine block: another load into it would
// interleave its copies with the first's, and a save from it would store
// bytes the load is still writing. Both are refused until the load ends.
TEST_F(SaveOverlapTest, ALoadOrASaveOfABlockStillBeingLoadedIsRefused) {
  sim_->Prefill(keys_, 0);
  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
  const std::vector<BlockKey> first(keys_.begin(), keys_.begin() + 1);
  const std::vector<uint32_t> into{5};
  engine_->HoldNextScatter();
  Completion load = rt_->Load(kTestNs, first, into, std::chrono::seconds(5));
  ASSERT_TRUE(engine_->WaitScatterHeld());

  Completion again = rt_->Load(kTestNs, first, into, std::chrono::seconds(5));
  ASSERT_TRUE(again.Poll());
  EXPECT_EQ(again.result(0).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.result(0).message().find("engine block 5 is still being loaded into by "
                                           "another load"),
            std::string::npos)
      << again.result(0).ToString();
  const auto other = ChainKeys({7});
  Completion save = rt_->Save(kTestNs, std::nullopt, other, into);
  ASSERT_TRUE(save.Poll());
  EXPECT_EQ(save.result(0).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(save.result(0).message().find("engine block 5 is still being loaded into"),
            std::string::npos)
      << save.result(0).ToString();
  EXPECT_FALSE(rt_->IsSaved(kTestNs, other));
  const std::vector<uint32_t> elsewhere{6};
  EXPECT_TRUE(rt_->Load(kTestNs, first, elsewhere, std::chrono::seconds(5)).Wait().ok());

  engine_->ReleaseScatter();
  ASSERT_TRUE(load.Wait().ok()) << load.status().ToString();
  EXPECT_TRUE(sim_->Holds(5, keys_[0]));
  EXPECT_TRUE(sim_->Load(first, 5).status().ok()) << "still refused after the load ended";
}

// One engine block holds one key's KV: a save naming a block twice would
// store the first key's bytes under the second key too. Refused whole.
TEST_F(SaveOverlapTest, ASaveFromOneEngineBlockTwiceIsRefused) {
  sim_->Prefill(keys_, 0);
  const std::vector<uint32_t> twice{3, 3};
  Completion c = rt_->Save(kTestNs, std::nullopt, std::span(keys_).first(2), twice);
  ASSERT_TRUE(c.Poll());
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.result(i).message(), "save: engine block 3 appears twice, for keys 0 and 1");
  }
  auto found = rt_->Lookup(kTestNs, keys_);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->hit_blocks, 0u);
}

// A save that waits for another's fill after making room asks the hub's
// admission again only about keys it has not asked about: each key counts
// once. Hub of 5 over a gated tier; X1..X4 fill 4 slots. A (Y1, Y2) is
// admitted and evicts X4 into the closed gate; meanwhile B takes the free
// slot for Y1 and holds its copy; once the gate opens A sees Y1 filling
// and waits, then takes B's copy and asks about nothing again.
TEST(SaveAdmissionRetryTest, AKeyIsAskedOnceWhenTheSaveWaitsForAnotherFill) {
  EngineSetup setup = MakeEngine(64);
  ASSERT_TRUE(setup.engine);
  auto engine = std::make_shared<GatedCopyEngine>(setup.engine);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 5);
  o.tiers[0].admission = {"cost"};  // no read rate given: admits, but asks
  o.tiers.push_back(LowerHostTier("gate", bb, 32));
  GateTier* gate = nullptr;
  o.tier_factory = GateTierFactory(&gate);
  auto rt = Runtime::Open(o, engine);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  SimEngine sim(rt->get(), setup.engine.get());
  const std::vector<BlockKey> x = ChainKeys({1, 2, 3, 4});
  const std::vector<BlockKey> y = ChainKeys({5, 6});
  sim.Prefill(x, 0);
  sim.Prefill(y, 4);
  ASSERT_TRUE(sim.SaveFrom(x, 0, 0).status().ok());
  ASSERT_EQ((*rt)->Stats().tiers[0].admitted_blocks, 4u);

  gate->gate_writes = true;
  const std::vector<uint32_t> a_blocks{4, 5};
  Completion a = (*rt)->Save(kTestNs, std::nullopt, y, a_blocks);
  ASSERT_EQ(gate->write_held.get_future().wait_for(std::chrono::seconds(5)),
            std::future_status::ready);
  engine->HoldNextGather();
  const std::vector<uint32_t> b_block{4};
  Completion b = (*rt)->Save(kTestNs, std::nullopt, std::span(y).first(1), b_block);
  ASSERT_TRUE(engine->WaitHeld());
  gate->open_gate.set_value();
  // A makes its room and finds Y1 filling: it waits for B's copy.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  engine->Release(/*fail=*/false);
  ASSERT_TRUE(b.WaitFor(std::chrono::seconds(5)).ok()) << b.status().ToString();
  ASSERT_TRUE(a.WaitFor(std::chrono::seconds(5)).ok()) << a.status().ToString();
  EXPECT_TRUE((*rt)->IsSaved(kTestNs, y));
  const RuntimeStats s = (*rt)->Stats();
  EXPECT_EQ(s.tiers[0].admitted_blocks, 4u + 2u + 1u) << "X, A's Y1 and Y2, B's Y1";
  EXPECT_EQ(s.tiers[0].admission_rejected_blocks, 0u);
  EXPECT_EQ(s.save_duplicates, 1u) << "A took B's copy of Y1";
}

}  // namespace
}  // namespace kvtier::testing
