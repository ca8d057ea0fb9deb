// Adoption across runtimes: two runtimes over one shared tier, as two
// engine processes over one Redis or kvtier-memd (a block one saves and
// demotes is found by the other's lookup, adopted, and loaded byte for
// byte; a shared tier that fails or stalls costs a lookup a bounded wait,
// once, then is left out for a while), and a restart over two persistent
// tiers that split a chain between them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/fault_tier.h"
#include "tests/support/tier_view.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

// What the test makes a shared view's Contains do (TierViewHooks).
struct ContainsFaults {
  std::atomic<int> calls{0};
  std::atomic<bool> fail{false};
  std::atomic<bool> stall{false};
  std::mutex mu;
  std::vector<std::pair<CompletionSource, size_t>> stalled;  // guarded by mu
  // Runs once, in the first stalled call, on the asking lookup's thread.
  std::function<void()> in_first_stall;  // set before the lookups

  bool Take(size_t keys, CompletionSource& done) {
    ++calls;
    if (stall) {
      {
        std::lock_guard lock(mu);
        stalled.emplace_back(std::move(done), keys);
      }
      if (auto f = std::exchange(in_first_stall, nullptr)) f();
      return true;
    }
    if (!fail) return false;
    for (size_t i = 0; i < keys; ++i) done.Set(i, Status::Unavailable("server down"));
    done.Finish();
    return true;
  }
  // Answers the stalled ones: a view waits for them when it shuts down.
  void Release() {
    std::vector<std::pair<CompletionSource, size_t>> held;
    {
      std::lock_guard lock(mu);
      held.swap(stalled);
    }
    for (auto& [done, n] : held) {
      for (size_t i = 0; i < n; ++i) done.Set(i, Status::Unavailable("released"));
      done.Finish();
    }
  }
};

class SharedAdoptTest : public ::testing::Test {
 protected:
  // Opens runtime `i` (0 or 1) over the shared tier; both use one engine
  // pool layout but their own pools.
  void Open(int i) {
    const uint64_t bb = setup_[i].layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 8);
    o.tiers[0].watermarks = {.high = 0.2, .low = 0.1};  // a pass demotes every saved block
    o.tiers.push_back(LowerHostTier("shared", bb, 32));
    o.tiers.back().shared = !private_[i];
    o.tier_factory = [this, i](const TierOptions& t,
                               const TierContext& c) -> Result<std::unique_ptr<Tier>> {
      if (t.name != "shared") return CreateTier(t, c);
      if (!inner_) {
        auto inner = CreateTier(t, c);
        if (!inner.ok()) return inner.status();
        inner_ = std::shared_ptr<Tier>(std::move(inner).value());
      }
      // Shared, and not local_index: the runtime must ask it for being shared.
      // Declared checksummed, as Redis and kvtier-memd are: the runtime
      // adopts another process's blocks only from a tier whose reads check
      // them (these tests write no wrong bytes).
      TierViewHooks hooks;
      hooks.instead_of_contains = [this, i](size_t keys, CompletionSource& done) {
        return faults_[i].Take(keys, done);
      };
      hooks.before_claim = [this, i] {
        if (auto f = std::exchange(before_claim_[i], nullptr)) f();
      };
      auto view = NewTierView(inner_, TierCapabilities{.shared = true, .checksummed = true},
                              std::move(hooks));
      if (!stall_removes_) return view;
      return NewFaultInjectingTier(std::move(view),
                                   FaultOptions{.stall_removes = remove_stalls_[i]});
    };
    auto rt = Runtime::Open(o, setup_[i].engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_[i] = std::move(rt).value();
    sim_[i] = std::make_unique<SimEngine>(rt_[i].get(), setup_[i].engine.get());
  }
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Open(0));
    ASSERT_NO_FATAL_FAILURE(Open(1));
    // Runtime 0 saves the chain and demotes it into the shared tier.
    sim_[0]->Prefill(keys_, 0);
    ASSERT_TRUE(sim_[0]->SaveFrom(keys_, 0, 0).status().ok());
    ASSERT_EQ(*rt_[0]->TEST_RunMoverOnce(), keys_.size());
    ASSERT_EQ(rt_[0]->Lookup(kTestNs, keys_)->tier, (std::vector<uint8_t>{1, 1, 1}));
  }

  void TearDown() override {
    for (ContainsFaults& f : faults_) f.Release();
    for (auto& stall : remove_stalls_) stall->Release();
  }

  EngineSetup setup_[2] = {MakeEngine(64), MakeEngine(64)};
  ContainsFaults faults_[2];
  // Runs once, in the next Claim of runtime `i`'s shared tier.
  std::function<void()> before_claim_[2];
  // The shared tier's removes can be held (remove_stalls_); its other
  // calls then wait for the view's answers.
  bool stall_removes_ = false;
  std::shared_ptr<CallStall> remove_stalls_[2] = {std::make_shared<CallStall>(),
                                                  std::make_shared<CallStall>()};
  bool private_[2] = {false, false};  // TierOptions::shared = false for that runtime
  std::shared_ptr<Tier> inner_;
  std::unique_ptr<Runtime> rt_[2];
  std::unique_ptr<SimEngine> sim_[2];
  const std::vector<BlockKey> keys_ = ChainKeys({1, 2, 3});
};

TEST_F(SharedAdoptTest, ALookupFindsWhatAnotherRuntimeSavedAndLoadsIt) {
  auto r = rt_[1]->Lookup(kTestNs, keys_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hit_blocks, 3u);
  EXPECT_EQ(r->tier, (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(rt_[1]->Stats().adopted_blocks, 3u);
  ASSERT_TRUE(sim_[1]->Load(keys_, 10).status().ok());
  for (uint32_t i = 0; i < keys_.size(); ++i) EXPECT_TRUE(sim_[1]->Holds(10 + i, keys_[i])) << i;
  // Known now: the next lookup asks the shared tier nothing.
  const int calls = faults_[1].calls;
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 3u);
  EXPECT_EQ(faults_[1].calls, calls);
}

// A runtime whose options mark the tier private (TierOptions::shared =
// false: only this process writes it) never asks it on a miss.
TEST_F(SharedAdoptTest, ATierMarkedPrivateIsNotAskedOnAMiss) {
  sim_[1].reset();
  rt_[1].reset();
  private_[1] = true;
  ASSERT_NO_FATAL_FAILURE(Open(1));
  auto r = rt_[1]->Lookup(kTestNs, keys_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hit_blocks, 0u);
  EXPECT_EQ(faults_[1].calls, 0);
  EXPECT_EQ(rt_[1]->Stats().adopted_blocks, 0u);
}

TEST_F(SharedAdoptTest, AChainIsAdoptedUpToWhatTheSharedTierHolds) {
  const std::vector<BlockKey> longer = ChainKeys({1, 2, 3, 4, 5});
  auto r = rt_[1]->Lookup(kTestNs, longer);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_blocks, 3u);
  EXPECT_EQ(rt_[1]->Stats().adopted_blocks, 3u);
}

TEST_F(SharedAdoptTest, AFailingSharedTierIsAMissThenLeftOutForAWhile) {
  faults_[1].fail = true;
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 0u);
  const int calls = faults_[1].calls;
  EXPECT_GE(calls, 1);
  faults_[1].fail = false;
  // Within the backoff the tier is not asked: still a miss.
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 0u);
  EXPECT_EQ(faults_[1].calls, calls);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 3u);
  EXPECT_EQ(rt_[1]->Stats().adopted_blocks, 3u);
}

TEST_F(SharedAdoptTest, AStalledSharedTierCostsALookupABoundedWaitOnce) {
  faults_[1].stall = true;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(std::chrono::milliseconds(500)));
  const int calls = faults_[1].calls;
  start = std::chrono::steady_clock::now();
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(std::chrono::milliseconds(40)));
  EXPECT_EQ(faults_[1].calls, calls) << "the stalled tier was asked again at once";
}

// Past the backoff, the first lookup to come claims the probe: a lookup on
// another thread while it waits on the tier does not ask the tier too.
TEST_F(SharedAdoptTest, PastTheBackoffOneLookupProbesTheTierForAll) {
  faults_[1].fail = true;
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 0u);
  faults_[1].fail = false;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the backoff is 1 s
  faults_[1].stall = true;
  const int before = faults_[1].calls;
  size_t other_hits = 99;
  faults_[1].in_first_stall = [&] {
    std::thread other([&] { other_hits = rt_[1]->Lookup(kTestNs, keys_)->hit_blocks; });
    other.join();  // a lookup that asked would end at its 50 ms wait
  };
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 0u);
  EXPECT_EQ(other_hits, 0u);
  EXPECT_EQ(faults_[1].calls, before + 1) << "the lookup during the probe asked the tier too";
}

// The adopting runtime accounts for the blocks it adopted: it may evict
// them, and a Remove there takes them from the shared tier for both.
TEST_F(SharedAdoptTest, AnAdoptedBlockRemovedByOneRuntimeIsGoneForTheOther) {
  ASSERT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 3u);
  ASSERT_TRUE(rt_[1]->Remove(kTestNs, std::span(keys_).last(1)).ok());
  EXPECT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 2u);
  sim_[0]->Scrub(0, 64);
  Completion c = sim_[0]->Load(keys_, 10);
  EXPECT_TRUE(c.result(0).ok());
  EXPECT_TRUE(c.result(1).ok());
  EXPECT_FALSE(c.result(2).ok()) << "runtime 0 loaded a block runtime 1 removed";
  EXPECT_FALSE(sim_[0]->Holds(12, keys_[2]));
}

// A block removed between its adoption and the Claim is removed from the
// shared tier again after the Claim (see RedisSharedRuntimeClaimTest). While
// that Remove runs, the block saved anew is not written there (the mover
// lets it go instead): the Remove, landing after the write, would take the
// copy the index names, and a lookup would promise a block that cannot load.
class SharedAdoptRemoveTest : public SharedAdoptTest {
 protected:
  SharedAdoptRemoveTest() { stall_removes_ = true; }
};

TEST_F(SharedAdoptRemoveTest, ABlockSavedAgainWaitsForTheRemoveAfterItsClaim) {
  before_claim_[1] = [this] {
    ASSERT_TRUE(rt_[1]->Remove(kTestNs, std::span(keys_).last(1)).ok());
    remove_stalls_[1]->Stall();  // holds the Remove after the Claim
  };
  ASSERT_EQ(rt_[1]->Lookup(kTestNs, keys_)->hit_blocks, 2u);
  ASSERT_EQ(remove_stalls_[1]->held(), 1u);
  // Runtime 1 saves the chain again, and another, which puts its hub over
  // the high watermark; its mover demotes what it may.
  sim_[1]->Prefill(keys_, 0);
  ASSERT_TRUE(sim_[1]->SaveFrom(keys_, 0, 0).status().ok());
  const std::vector<BlockKey> other = ChainKeys({7, 8});
  sim_[1]->Prefill(other, 3);
  ASSERT_TRUE(sim_[1]->SaveFrom(other, 0, 3).status().ok());
  ASSERT_TRUE(rt_[1]->TEST_RunMoverOnce().ok());
  remove_stalls_[1]->Release();
  // Every block a lookup reports loads, byte for byte.
  const size_t hits = rt_[1]->Lookup(kTestNs, keys_)->hit_blocks;
  EXPECT_GE(hits, 2u);
  const std::vector<BlockKey> found(keys_.begin(), keys_.begin() + hits);
  sim_[1]->Scrub(0, 64);
  Completion c = sim_[1]->Load(found, 10);
  for (size_t i = 0; i < found.size(); ++i) {
    EXPECT_TRUE(c.result(i).ok()) << i << ": " << c.result(i).ToString();
    EXPECT_TRUE(sim_[1]->Holds(10 + i, keys_[i])) << i;
  }
}

// After a restart over two persistent tiers, a chain whose head one holds
// and whose tail the other holds (leaf-first demotion sends tails deeper)
// is adopted whole by one lookup, not one tier's run per lookup.
TEST(TwoTierAdoptTest, AChainSplitAcrossTwoTiersIsAdoptedByOneLookup) {
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  std::shared_ptr<Tier> disks[2];  // near (4 blocks), far (32)
  for (int i = 0; i < 2; ++i) {
    auto t = CreateTier(LowerHostTier("disk", bb, i == 0 ? 4 : 32), TierContext{bb});
    ASSERT_TRUE(t.ok());
    disks[i] = std::shared_ptr<Tier>(std::move(t).value());
  }
  auto open = [&]() -> std::unique_ptr<Runtime> {
    RuntimeOptions o = MakeOptions(bb, 8);
    o.tiers[0].watermarks = {.high = 0.2, .low = 0.1};  // a pass demotes every saved block
    o.tiers.push_back(LowerHostTier("near", bb, 4));
    o.tiers[1].watermarks = {.high = 0.8, .low = 0.75};  // keeps 3
    o.tiers.push_back(LowerHostTier("far", bb, 32));
    o.tier_factory = [&](const TierOptions& t,
                         const TierContext& c) -> Result<std::unique_ptr<Tier>> {
      if (t.name == "host") return CreateTier(t, c);
      return NewTierView(disks[t.name == "near" ? 0 : 1],
                         TierCapabilities{.persistent = true, .local_index = true});
    };
    auto rt = Runtime::Open(o, setup.engine);
    EXPECT_TRUE(rt.ok()) << rt.status().ToString();
    return rt.ok() ? std::move(rt).value() : nullptr;
  };
  const std::vector<BlockKey> keys = ChainKeys({1, 2, 3, 4, 5, 6});
  const std::vector<uint8_t> split = {1, 1, 1, 2, 2, 2};
  {
    std::unique_ptr<Runtime> before = open();
    ASSERT_TRUE(before);
    SimEngine sim(before.get(), setup.engine.get());
    sim.Prefill(keys, 0);
    ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
    for (int pass = 0; pass < 4; ++pass) ASSERT_TRUE(before->TEST_RunMoverOnce().ok());
    ASSERT_EQ(before->Lookup(kTestNs, keys)->tier, split);
  }
  std::unique_ptr<Runtime> after = open();  // a restart: an empty index
  ASSERT_TRUE(after);
  auto r = after->Lookup(kTestNs, keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tier, split);
  EXPECT_EQ(after->Stats().adopted_blocks, 6u);
  SimEngine sim(after.get(), setup.engine.get());
  sim.Scrub(0, 64);
  ASSERT_TRUE(sim.Load(keys, 10).status().ok());
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(sim.Holds(10 + i, keys[i])) << i;
  after.reset();
  for (auto& d : disks) d->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
