// Calls at the edges of what an engine does: a key repeated in one save or
// load, a remove racing the save of a child, a preemption proposal after
// shutdown, and calls refused before they run. Each answer must be true:
// OK only for what is stored or loaded, and every failure counted.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

using std::chrono::milliseconds;

std::vector<BlockKey> One(const BlockKey& key) { return {key}; }

class CallEdgesTest : public ::testing::Test {
 protected:
  void Open(uint64_t hub_blocks, uint64_t lower_blocks = 0, uint32_t workers = 2,
            uint32_t max_queued = 0) {
    setup_ = MakeEngine(64);
    ASSERT_TRUE(setup_.engine);
    RuntimeOptions o = MakeOptions(setup_.layout.BlockBytes(), hub_blocks);
    if (lower_blocks > 0) {
      o.tiers.push_back(LowerHostTier("below", setup_.layout.BlockBytes(), lower_blocks));
    }
    o.worker_threads = workers;
    if (max_queued > 0) o.max_queued_requests = max_queued;
    auto rt = Runtime::Open(std::move(o), setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  // Copies touching engine block `block` wait until `release` is set; the
  // returned future is ready once the first has begun.
  std::future<void> HoldCopiesOf(uint32_t block, std::shared_future<void> release) {
    auto entered = std::make_shared<std::promise<void>>();
    auto once = std::make_shared<std::once_flag>();
    std::future<void> began = entered->get_future();
    setup_.engine->TEST_SetFaultHook([block, release, entered, once](uint32_t b, uint32_t) {
      if (b == block) {
        std::call_once(*once, [&] { entered->set_value(); });
        release.wait();
      }
      return CopyFault{};
    });
    return began;
  }
  uint64_t Errors(const RuntimeStats& s, std::string_view op, StatusCode code) {
    for (const ErrorStats& e : s.errors) {
      if (e.op == op && e.code == code) return e.blocks;
    }
    return 0;
  }

  EngineSetup setup_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

// A, A, B with A's copy failing: the repeat used to answer OK with nothing
// stored. It ends as its first occurrence does; B, chained under A, fails.
TEST_F(CallEdgesTest, AKeyRepeatedInASaveEndsAsItsFirstCopy) {
  Open(16);
  const auto k = ChainKeys({1, 2});
  const std::vector<BlockKey> keys = {k[0], k[0], k[1]};
  sim_->Prefill(One(k[0]), 0);
  sim_->Prefill(One(k[0]), 1);
  sim_->Prefill(One(k[1]), 2);
  const std::vector<uint32_t> blocks = {0, 1, 2};
  setup_.engine->TEST_SetFaultHook([](uint32_t b, uint32_t) {
    CopyFault f;
    if (b == 0) f.status = Status::IOError("injected");
    return f;
  });
  Completion failed = rt_->Save(kTestNs, std::nullopt, keys, blocks);
  (void)failed.Wait();
  EXPECT_EQ(failed.result(0).code(), StatusCode::kIOError);
  EXPECT_EQ(failed.result(1).code(), StatusCode::kIOError) << failed.result(1).ToString();
  EXPECT_EQ(failed.result(2).code(), StatusCode::kCancelled);
  EXPECT_FALSE(rt_->IsSaved(kTestNs, One(k[0])));
  // Every item once: the repeat is a failure, not a duplicate.
  EXPECT_EQ(rt_->Stats().save_failures, 3u);
  EXPECT_EQ(rt_->Stats().save_duplicates, 0u);

  setup_.engine->TEST_SetFaultHook({});
  Completion stored = rt_->Save(kTestNs, std::nullopt, keys, blocks);
  (void)stored.Wait();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(stored.result(i).ok()) << i;
  EXPECT_TRUE(rt_->IsSaved(kTestNs, k));
  EXPECT_EQ(rt_->Stats().saved_blocks, 2u);
  EXPECT_EQ(rt_->Stats().save_duplicates, 1u);
  sim_->Scrub(10, 2);
  Completion load = sim_->Load(k, 10);
  EXPECT_EQ(load.ok_count(), 2u);
  EXPECT_TRUE(sim_->Holds(10, k[0]));
  EXPECT_TRUE(sim_->Holds(11, k[1]));
}

// A below the hub, loaded into two engine blocks, with room in the hub for
// one staged copy: both blocks get it (the second used to fail for room).
TEST_F(CallEdgesTest, AKeyLoadedIntoTwoBlocksIsStagedOnce) {
  Open(4, 16);
  const auto a = ChainKeys({1}), b = ChainKeys({2}), c = ChainKeys({3}), d = ChainKeys({4});
  const auto x = ChainKeys({5});
  uint32_t block = 0;
  for (const auto* keys : {&a, &b, &c, &d, &x}) {
    sim_->Prefill(*keys, block);
    ASSERT_TRUE(sim_->SaveFrom(*keys, 0, block).status().ok());
    ++block;
  }
  // Saving X made room by demoting A, the least recent block.
  auto found = rt_->Lookup(kTestNs, a);
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->hit_blocks, 1u);
  ASSERT_EQ(found->tier[0], 1u) << "A should be below the hub";
  auto pin_b = rt_->LookupAndPin(kTestNs, b);
  auto pin_c = rt_->LookupAndPin(kTestNs, c);
  auto pin_d = rt_->LookupAndPin(kTestNs, d);
  ASSERT_TRUE(pin_b.ok() && pin_c.ok() && pin_d.ok());

  sim_->Scrub(10, 2);
  const std::vector<BlockKey> twice = {a[0], a[0]};
  const std::vector<uint32_t> into = {10, 11};
  Completion load = rt_->Load(kTestNs, twice, into, milliseconds(2000));
  (void)load.Wait();
  EXPECT_TRUE(load.result(0).ok()) << load.result(0).ToString();
  EXPECT_TRUE(load.result(1).ok()) << load.result(1).ToString();
  EXPECT_TRUE(sim_->Holds(10, a[0]));
  EXPECT_TRUE(sim_->Holds(11, a[0]));
}

// A child being copied in is not stored yet: removing its parent is Busy
// (retry), not the InvalidArgument of a parent with stored children.
TEST_F(CallEdgesTest, RemovingAParentWhileItsChildIsBeingSavedIsBusy) {
  Open(16);
  const auto k = ChainKeys({1, 2});
  sim_->Prefill(k, 0);
  ASSERT_TRUE(sim_->SaveFrom(One(k[0]), 0, 0).status().ok());
  std::promise<void> release;
  std::future<void> copying = HoldCopiesOf(1, release.get_future().share());
  const std::vector<BlockKey> child = {k[1]};
  const std::vector<uint32_t> from = {1};
  Completion save = rt_->Save(kTestNs, k[0], child, from);
  ASSERT_EQ(copying.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const Status removed = rt_->Remove(kTestNs, One(k[0]));
  EXPECT_EQ(removed.code(), StatusCode::kBusy) << removed.ToString();
  EXPECT_NE(removed.message().find("1 children being saved"), std::string_view::npos)
      << removed.ToString();
  release.set_value();
  ASSERT_TRUE(save.Wait().ok());
  // Stored now: the parent keeps its child.
  EXPECT_EQ(rt_->Remove(kTestNs, One(k[0])).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(rt_->Remove(kTestNs, k).ok());
  EXPECT_FALSE(rt_->IsSaved(kTestNs, One(k[0])));
}

// A child save that fails leaves the parent free to go.
TEST_F(CallEdgesTest, AParentWhoseChildFailedToSaveMayBeRemoved) {
  Open(16);
  const auto k = ChainKeys({1, 2});
  sim_->Prefill(k, 0);
  ASSERT_TRUE(sim_->SaveFrom(One(k[0]), 0, 0).status().ok());
  setup_.engine->TEST_SetFaultHook([](uint32_t b, uint32_t) {
    CopyFault f;
    if (b == 1) f.status = Status::IOError("injected");
    return f;
  });
  const std::vector<BlockKey> child = {k[1]};
  const std::vector<uint32_t> from = {1};
  EXPECT_EQ(rt_->Save(kTestNs, k[0], child, from).Wait().code(), StatusCode::kIOError);
  EXPECT_TRUE(rt_->Remove(kTestNs, One(k[0])).ok());
}

// Once shut down nothing loads: a proposal must not call a victim saved.
TEST_F(CallEdgesTest, ProposalsAfterShutdownCountNothingAsSaved) {
  Open(16);
  const auto k = ChainKeys({1, 2});
  sim_->Prefill(k, 0);
  ASSERT_TRUE(sim_->SaveFrom(k, 0, 0).status().ok());
  ASSERT_TRUE(rt_->TrackRequest(7, kTestNs, k, 2).ok());
  const auto before = rt_->ProposePreemption(1);
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(before[0].saved_blocks, 2u);
  EXPECT_TRUE(before[0].unsaved_keys.empty());
  rt_->Shutdown();
  const auto after = rt_->ProposePreemption(1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].saved_blocks, 0u);
  EXPECT_EQ(after[0].unsaved_keys, k);
  EXPECT_FALSE(after[0].parent.has_value());
  EXPECT_FALSE(rt_->IsSaved(kTestNs, k));
}

// Bad arguments, a full queue and a shut-down runtime fail every block
// before any work runs; the statistics count them as the engine sees them.
TEST_F(CallEdgesTest, CallsRefusedBeforeTheyRunAreCounted) {
  Open(16, 0, /*workers=*/1, /*max_queued=*/1);
  const auto k = ChainKeys({1, 2});
  sim_->Prefill(k, 0);
  const std::vector<uint32_t> out_of_range = {0, 99};
  EXPECT_EQ(rt_->Save(kTestNs, std::nullopt, k, out_of_range).status().code(),
            StatusCode::kInvalidArgument);
  const std::vector<uint32_t> twice = {5, 5};
  EXPECT_EQ(rt_->Load(kTestNs, k, twice, milliseconds(100)).status().code(),
            StatusCode::kInvalidArgument);
  RuntimeStats s = rt_->Stats();
  EXPECT_EQ(s.save_blocks, 2u);
  EXPECT_EQ(s.save_failures, 2u);
  EXPECT_EQ(s.load_blocks, 2u);
  EXPECT_EQ(s.load_failures, 2u);
  EXPECT_EQ(Errors(s, "save", StatusCode::kInvalidArgument), 2u);
  EXPECT_EQ(Errors(s, "load", StatusCode::kInvalidArgument), 2u);

  // One save runs (held in its copy), one waits in the queue, the third is
  // refused Busy.
  std::promise<void> release;
  std::future<void> copying = HoldCopiesOf(0, release.get_future().share());
  const std::vector<uint32_t> b0 = {0}, b1 = {1}, b2 = {2};
  Completion running = rt_->Save(kTestNs, std::nullopt, ChainKeys({10}), b0);
  ASSERT_EQ(copying.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  Completion queued = rt_->Save(kTestNs, std::nullopt, ChainKeys({11}), b1);
  ASSERT_FALSE(queued.Poll()) << queued.status().ToString();
  const RuntimeStats mid = rt_->Stats();
  Completion refused = rt_->Save(kTestNs, std::nullopt, ChainKeys({12}), b2);
  ASSERT_TRUE(refused.Poll());
  EXPECT_EQ(refused.status().code(), StatusCode::kBusy);
  release.set_value();
  ASSERT_TRUE(running.Wait().ok());
  ASSERT_TRUE(queued.Wait().ok());
  s = rt_->Stats();
  EXPECT_EQ(s.busy_rejections, mid.busy_rejections + 1);
  EXPECT_EQ(s.save_failures, mid.save_failures + 1);
  EXPECT_EQ(Errors(s, "save", StatusCode::kBusy), Errors(mid, "save", StatusCode::kBusy) + 1);

  rt_->Shutdown();
  EXPECT_EQ(rt_->Save(kTestNs, std::nullopt, ChainKeys({13}), b2).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(Errors(rt_->Stats(), "save", StatusCode::kUnavailable), 1u);
}

}  // namespace
}  // namespace kvtier::testing
