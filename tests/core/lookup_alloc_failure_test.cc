// Lookup and LookupAndPin when memory runs out: every N-th allocation of one
// lookup is made to throw bad_alloc (tests/core/alloc_failure.h), on
// whichever thread makes it, for each N in turn. Each try must answer a Status
// (never throw into the engine), take no pin it does not hand back, and
// leave the runtime answering the next lookup exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <vector>

#include "tests/core/alloc_failure.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

class LookupAllocFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions o = MakeOptions(setup_.layout.BlockBytes(), 16);
    // Policies that observe every lookup: the radix tree and the sketch
    // allocate as they learn, so a failure can land inside them too.
    o.tiers[0].admission = {"marconi", "frequency"};
    o.tiers[0].policy.frequency_threshold = 1;
    o.tiers[0].policy.marconi_probation = 1;  // every request continues: new paths admitted
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
    stored_ = ChainKeys({1, 2, 3, 4});
    ASSERT_TRUE(rt_->Lookup(kTestNs, stored_).ok());  // a sighting: frequency admits
    sim_->Prefill(stored_, 0);
    ASSERT_TRUE(sim_->SaveFrom(stored_, 0, 0).status().ok());
    ASSERT_EQ(rt_->Lookup(kTestNs, stored_)->hit_blocks, 4u);
  }

  // Runs `lookup` with the n-th allocation failing, for n = 0, 1, ... until
  // one run allocates fewer than n times. `lookup` returns its Status and
  // hit count; what it returns is checked only once allocations are
  // disarmed (a check may allocate). Returns how many runs failed.
  template <typename Lookup>
  int FailEachAllocation(Lookup lookup) {
    int failed = 0;
    for (long n = 0; n < 100000; ++n) {
      ids_ = ChainKeys({1, 2, 3, 4, 100 + uint64_t(n), 200 + uint64_t(n)});  // new tails
      bool threw = false;
      Status st;
      size_t hits = 0;
      FailAllocationAfter(n);
      try {
        st = lookup(&hits);
      } catch (...) {
        threw = true;
      }
      const bool injected = DisarmAllocationFailures();
      release_();
      EXPECT_FALSE(threw) << "an exception reached the caller at allocation " << n;
      if (st.ok()) {
        EXPECT_EQ(hits, 4u) << n;
      } else {
        ++failed;
        EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
      }
      if (!injected) return failed;
    }
    ADD_FAILURE() << "the lookup never completed without a failure";
    return failed;
  }

  // Every stored block is still found, unpinned: a save of more blocks than
  // the free slots evicts them only if no failed lookup left a pin.
  void ExpectRuntimeIntact() {
    auto r = rt_->Lookup(kTestNs, stored_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->hit_blocks, 4u);
    const std::vector<BlockKey> filler = ChainKeys({50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60,
                                                    61, 62, 63, 64, 65});
    ASSERT_TRUE(rt_->Lookup(kTestNs, filler).ok());
    sim_->Prefill(filler, 8);
    ASSERT_TRUE(sim_->SaveFrom(filler, 0, 8).status().ok());
    EXPECT_EQ(rt_->Lookup(kTestNs, stored_)->hit_blocks, 0u) << "a failed lookup left a pin";
  }

  EngineSetup setup_ = MakeEngine(64);
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  std::vector<BlockKey> stored_;
  std::vector<BlockKey> ids_;
  std::function<void()> release_ = [] {};  // drops what a run kept
};

TEST_F(LookupAllocFailureTest, LookupAnswersAStatusWhereverMemoryRunsOut) {
  const int failed = FailEachAllocation([&](size_t* hits) {
    Result<LookupResult> r = rt_->Lookup(kTestNs, ids_);
    if (!r.ok()) return r.status();
    *hits = r->hit_blocks;
    return Status::Ok();
  });
  EXPECT_GT(failed, 0) << "no injected failure reached the lookup's answer";
  std::printf("lookup: %d of its allocations failed it\n", failed);
  ExpectRuntimeIntact();
}

TEST_F(LookupAllocFailureTest, LookupAndPinTakesNoPinWhenMemoryRunsOut) {
  std::optional<PinnedPrefix> held;  // dropped once allocations are disarmed
  release_ = [&] { held.reset(); };
  const int failed = FailEachAllocation([&](size_t* hits) {
    Result<PinnedPrefix> pin = rt_->LookupAndPin(kTestNs, ids_);
    if (!pin.ok()) return pin.status();
    *hits = pin->hit_blocks();
    held.emplace(std::move(pin).value());
    return Status::Ok();
  });
  EXPECT_GT(failed, 0) << "no injected failure reached the lookup's answer";
  ExpectRuntimeIntact();
}

}  // namespace
}  // namespace kvtier::testing
