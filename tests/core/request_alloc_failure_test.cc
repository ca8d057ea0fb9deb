// Save, Load and Remove when memory runs out, at every allocation they
// make: the n-th allocation of one call throws bad_alloc
// (tests/core/alloc_failure.h), for n = 0, 1, ... until a call makes fewer.
// The save finds the hub full and demotes to make room; the load stages its
// blocks from a lower tier, evicting the hub's; so the failure lands in the
// admission, the reservation, the eviction, the staging and the copy in
// turn. Each call must answer a Status (never throw into the engine), store
// or load no wrong bytes, and leave nothing pinned or taken: once memory is
// back, everything removes and the hub is empty.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "tests/core/alloc_failure.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kHubBlocks = 4;
constexpr uint32_t kScratch = 16;  // engine blocks a load lands in
constexpr auto kAnswer = std::chrono::seconds(20);

class RequestAllocFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, kHubBlocks);
    o.tiers.push_back(LowerHostTier("lower", bb, 16));
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
    sim_->Prefill(below_, 0);
    sim_->Prefill(hub_, kHubBlocks);
    all_ = below_;
    all_.insert(all_.end(), hub_.begin(), hub_.end());
  }

  // `below_` in the lower tier only (the hub made room for `hub_`), `hub_`
  // filling the hub.
  void Store() {
    ASSERT_TRUE(sim_->SaveFrom(below_, 0, 0).status().ok());
    ASSERT_TRUE(sim_->SaveFrom(hub_, 0, kHubBlocks).status().ok());
    ASSERT_EQ(rt_->Lookup(kTestNs, below_)->tier, std::vector<uint8_t>(kHubBlocks, 1));
  }

  // With memory back: nothing is pinned or moving (a Remove would be
  // Busy), every slot is back, and the runtime saves and loads again.
  void ExpectNothingLeft(long n) {
    const Status removed = rt_->Remove(kTestNs, all_);
    ASSERT_TRUE(removed.ok()) << "allocation " << n << ": " << removed.ToString();
    const RuntimeStats s = rt_->Stats();
    ASSERT_EQ(s.tiers[0].blocks, 0u) << "allocation " << n << ": a hub slot stayed taken";
    ASSERT_EQ(s.tiers[1].blocks, 0u) << "allocation " << n;
    Store();
  }

  // Runs `call` (a Save or a Load, returning its Completion) with the n-th
  // allocation failing and waits for its answer; sets *injected when a
  // failure was injected. A failure is recorded when an exception reached
  // here or no answer came.
  template <typename Call>
  Completion RunFailing(long n, const Call& call, bool* injected) {
    Completion c;
    bool threw = false;
    bool answered = true;
    FailAllocationAfter(n);
    try {
      c = call();
      answered = c.WaitFor(kAnswer).code() != StatusCode::kDeadlineExceeded || c.Poll();
    } catch (...) {
      threw = true;
    }
    *injected = DisarmAllocationFailures();
    EXPECT_FALSE(threw) << "an exception reached the engine at allocation " << n;
    EXPECT_TRUE(answered) << "the call never finished at allocation " << n;
    return c;
  }

  EngineSetup setup_ = MakeEngine(64);
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  const std::vector<BlockKey> below_ = ChainKeys({1, 2, 3, 4});
  const std::vector<BlockKey> hub_ = ChainKeys({11, 12, 13, 14});
  std::vector<BlockKey> all_;
};

TEST_F(RequestAllocFailureTest, LoadAnswersEveryBlockAndKeepsNothingWhereverMemoryRunsOut) {
  Store();
  const std::vector<uint32_t> scratch = {kScratch, kScratch + 1, kScratch + 2, kScratch + 3};
  int failed = 0;
  for (long n = 0; n < 100000; ++n) {
    sim_->Scrub(kScratch, kHubBlocks);
    bool injected = false;
    const Completion load = RunFailing(
        n, [&] { return rt_->Load(kTestNs, below_, scratch, std::chrono::seconds(10)); },
        &injected);
    if (HasFailure()) return;
    ASSERT_EQ(load.size(), below_.size()) << n;
    for (uint32_t i = 0; i < load.size(); ++i) {
      if (load.result(i).ok()) {
        EXPECT_TRUE(sim_->Holds(kScratch + i, below_[i])) << "wrong bytes at allocation " << n;
      } else {
        ++failed;
      }
    }
    ExpectNothingLeft(n);
    if (HasFatalFailure()) return;
    if (!injected) {
      EXPECT_TRUE(load.status().ok()) << load.status().ToString();
      break;
    }
  }
  EXPECT_GT(failed, 0) << "no injected failure reached the load's answer";
  std::printf("load: %d blocks failed over every allocation\n", failed);
}

TEST_F(RequestAllocFailureTest, SaveAnswersEveryBlockAndKeepsNothingWhereverMemoryRunsOut) {
  const std::vector<uint32_t> blocks = {kHubBlocks, kHubBlocks + 1, kHubBlocks + 2, kHubBlocks + 3};
  int failed = 0;
  for (long n = 0; n < 100000; ++n) {
    ASSERT_TRUE(sim_->SaveFrom(below_, 0, 0).status().ok());  // fills the hub
    bool injected = false;
    const Completion save = RunFailing(
        n, [&] { return rt_->Save(kTestNs, std::nullopt, hub_, blocks); }, &injected);
    if (HasFailure()) return;
    ASSERT_EQ(save.size(), hub_.size()) << n;
    // A save stores a prefix of its chain: the blocks answered OK, which
    // load back byte for byte.
    size_t ok = 0;
    while (ok < save.size() && save.result(ok).ok()) ++ok;
    for (size_t i = ok; i < save.size(); ++i) {
      EXPECT_FALSE(save.result(i).ok()) << "allocation " << n << ": block " << i;
      ++failed;
    }
    const size_t stored = rt_->Lookup(kTestNs, hub_)->hit_blocks;
    EXPECT_EQ(stored, ok) << "allocation " << n;
    if (stored > 0) {
      sim_->Scrub(kScratch, kHubBlocks);
      const std::vector<BlockKey> prefix(hub_.begin(), hub_.begin() + stored);
      ASSERT_TRUE(sim_->Load(prefix, kScratch).status().ok()) << n;
      for (size_t i = 0; i < stored; ++i) {
        EXPECT_TRUE(sim_->Holds(kScratch + i, hub_[i])) << "wrong bytes at allocation " << n;
      }
    }
    ExpectNothingLeft(n);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(rt_->Remove(kTestNs, all_).ok());
    if (!injected) {
      EXPECT_TRUE(save.status().ok()) << save.status().ToString();
      break;
    }
  }
  EXPECT_GT(failed, 0) << "no injected failure reached the save's answer";
  std::printf("save: %d blocks failed over every allocation\n", failed);
}

TEST_F(RequestAllocFailureTest, RemoveAnswersAStatusWhereverMemoryRunsOut) {
  int failed = 0;
  for (long n = 0; n < 100000; ++n) {
    Store();
    bool threw = false;
    Status st;
    FailAllocationAfter(n);
    try {
      st = rt_->Remove(kTestNs, all_);
    } catch (...) {
      threw = true;
    }
    const bool injected = DisarmAllocationFailures();
    ASSERT_FALSE(threw) << "an exception reached the engine at allocation " << n;
    if (!st.ok()) {
      ++failed;
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << n << ": " << st.ToString();
    }
    // What it left is removed now, and the blocks it removed are gone.
    ExpectNothingLeft(n);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(rt_->Remove(kTestNs, all_).ok());
    if (!injected) {
      EXPECT_TRUE(st.ok()) << st.ToString();
      break;
    }
  }
  EXPECT_GT(failed, 0) << "no injected failure reached the remove's answer";
  std::printf("remove: %d of its allocations failed it\n", failed);
}

}  // namespace
}  // namespace kvtier::testing
