// Hybrid models' state checkpoints (Runtime::SaveState / LoadState): a
// lookup answers only up to the deepest block whose checkpoint is stored,
// checkpoints round-trip byte for byte through the hub and a lower tier,
// leave before their boundary, are pinned with it, removed with it, asked
// about by admission as the boundary's checkpoint, and adopted after a
// restart.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/core/disk_view_fixture.h"
#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kStateBlocks = 2;

// The keys whose content stands for the checkpoint of `boundary` (what
// SimEngine::Prefill writes and Holds checks).
std::vector<BlockKey> PartKeys(const BlockKey& boundary) {
  const KeyHasher h(kTestNs, HashAlgorithm::kXxh3_128);
  std::vector<BlockKey> parts;
  for (uint32_t i = 0; i < kStateBlocks; ++i) parts.push_back(h.StatePart(boundary, i));
  return parts;
}

// Writes the checkpoint of `boundary` into engine blocks first.. and saves it.
Completion SaveStateOf(Runtime& rt, SimEngine& sim, const BlockKey& boundary, uint32_t first,
                       const SaveOptions& opts = {}) {
  sim.Prefill(PartKeys(boundary), first);
  const std::vector<uint32_t> blocks = {first, first + 1};
  Completion c = rt.SaveState(kTestNs, boundary, blocks, opts);
  (void)c.Wait();
  return c;
}

// Loads the checkpoint of `boundary` into engine blocks first.. and reports
// whether they hold it byte for byte.
::testing::AssertionResult LoadsState(Runtime& rt, SimEngine& sim, const BlockKey& boundary,
                                      uint32_t first) {
  sim.Scrub(first, kStateBlocks);
  const std::vector<uint32_t> blocks = {first, first + 1};
  Completion c = rt.LoadState(kTestNs, boundary, blocks, std::chrono::seconds(10));
  if (Status st = c.Wait(); !st.ok()) return ::testing::AssertionFailure() << st.ToString();
  const std::vector<BlockKey> parts = PartKeys(boundary);
  for (uint32_t i = 0; i < kStateBlocks; ++i) {
    if (!sim.Holds(first + i, parts[i])) {
      return ::testing::AssertionFailure() << "part " << i << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

class RuntimeStateTest : public ::testing::Test {
 protected:
  RuntimeStateTest() : setup_(MakeEngine(64)), bb_(setup_.layout.BlockBytes()) {}

  RuntimeOptions Options(uint64_t hub_blocks) {
    RuntimeOptions o = MakeOptions(bb_, hub_blocks);
    o.state_blocks = kStateBlocks;
    return o;
  }
  void Open(const RuntimeOptions& o) {
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  // Saves `keys` whole (blocks 0..), bypassing admission.
  void SaveChain(const std::vector<BlockKey>& keys) {
    sim_->Prefill(keys, 0);
    std::vector<uint32_t> blocks;
    for (uint32_t i = 0; i < keys.size(); ++i) blocks.push_back(i);
    Completion c = rt_->Save(kTestNs, std::nullopt, keys, blocks, {.bypass_admission = true});
    ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
  }
  // A hub of 4 blocks at watermarks 0.5 / 0.25, over a 16-block tier "ssd"
  // when `ssd`, holding the chain keys_ = {1, 2} with a checkpoint of 2
  // parts on keys_[1]: a mover pass takes 3 of the 4 blocks out.
  void OpenWithACheckpoint(bool ssd) {
    RuntimeOptions o = Options(4);
    o.tiers[0].watermarks = {.high = 0.5, .low = 0.25};
    if (ssd) o.tiers.push_back(LowerHostTier("ssd", bb_, 16));
    Open(o);
    keys_ = ChainKeys({1, 2});
    SaveChain(keys_);
    ASSERT_TRUE(SaveStateOf(*rt_, *sim_, keys_[1], 20).status().ok());
  }
  size_t Hits(const std::vector<BlockKey>& keys) {
    auto r = rt_->Lookup(kTestNs, keys);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->hit_blocks : 0;
  }

  EngineSetup setup_;
  uint64_t bb_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  std::vector<BlockKey> keys_;  // OpenWithACheckpoint's chain
};

TEST_F(RuntimeStateTest, ALookupAnswersTheDeepestHitWithItsState) {
  Open(Options(16));
  const auto keys = ChainKeys({1, 2, 3, 4});
  SaveChain(keys);
  EXPECT_EQ(Hits(keys), 0u) << "KV without any state is no hit for a hybrid model";
  EXPECT_EQ(rt_->Stats().lookup_state_cut_blocks, 4u);

  Completion s = SaveStateOf(*rt_, *sim_, keys[1], 20);
  ASSERT_TRUE(s.status().ok()) << s.status().ToString();
  EXPECT_EQ(s.bytes(0) + s.bytes(1), 2 * bb_);
  auto r = rt_->Lookup(kTestNs, keys);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_blocks, 2u);
  EXPECT_EQ(r->tier, (std::vector<uint8_t>{0, 0}));
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.lookup_state_cut_blocks, 6u);
  EXPECT_EQ(st.lookup_hit_blocks, 2u);
  EXPECT_EQ(st.saved_blocks, 6u);  // 4 KV blocks and 2 parts

  ASSERT_TRUE(SaveStateOf(*rt_, *sim_, keys[3], 22).status().ok());
  EXPECT_EQ(Hits(keys), 4u);
  EXPECT_TRUE(LoadsState(*rt_, *sim_, keys[1], 40));
  EXPECT_TRUE(LoadsState(*rt_, *sim_, keys[3], 42));
  // A shorter request resumes from the deepest checkpoint within it.
  EXPECT_EQ(Hits({keys.begin(), keys.begin() + 3}), 2u);

  // No checkpoint at keys[0]: each part is a miss.
  const std::vector<uint32_t> blocks = {44, 45};
  Completion l = rt_->LoadState(kTestNs, keys[0], blocks, std::chrono::seconds(10));
  (void)l.Wait();
  EXPECT_EQ(l.result(0).code(), StatusCode::kNotFound);
  EXPECT_EQ(l.result(1).code(), StatusCode::kNotFound);

  // Saving a stored checkpoint again copies nothing.
  Completion again = SaveStateOf(*rt_, *sim_, keys[1], 20);
  ASSERT_TRUE(again.status().ok());
  EXPECT_EQ(rt_->Stats().save_duplicates, 2u);
}

TEST_F(RuntimeStateTest, BadStateCallsAreRefusedWithTheReason) {
  RuntimeOptions off = Options(16);
  off.state_blocks = 0;
  Open(off);
  const auto keys = ChainKeys({1});
  SaveChain(keys);
  const std::vector<uint32_t> two = {0, 1};
  Completion c = rt_->SaveState(kTestNs, keys[0], two, {});
  EXPECT_EQ(c.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("state_blocks is 0"), std::string::npos)
      << c.status().ToString();
  c = rt_->LoadState(kTestNs, keys[0], {}, std::chrono::seconds(1));
  EXPECT_EQ(c.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Hits(keys), 1u) << "without state_blocks, lookups answer KV alone";

  Open(Options(16));
  SaveChain(keys);
  const std::vector<uint32_t> one = {0};
  c = rt_->SaveState(kTestNs, keys[0], one, {});
  EXPECT_EQ(c.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("takes 2"), std::string::npos) << c.status().ToString();
  // A wrong count sizes neither the answer nor the failures counted: a
  // negative one cast to size_t asked for an answer of 2^64 items.
  const RuntimeStats before = rt_->Stats();
  const std::vector<uint32_t> thousand(1000, 0);
  c = rt_->SaveState(kTestNs, keys[0], thousand, {});
  EXPECT_EQ(c.Wait().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  EXPECT_EQ(c.size(), 2u);
  c = rt_->LoadState(kTestNs, keys[0], thousand, std::chrono::seconds(1));
  EXPECT_EQ(c.Wait().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(rt_->Stats().save_failures - before.save_failures, 2u);
  EXPECT_EQ(rt_->Stats().load_failures - before.load_failures, 2u);
  const std::vector<uint32_t> out_of_range = {0, 64};
  c = rt_->SaveState(kTestNs, keys[0], out_of_range, {});
  EXPECT_EQ(c.Wait().code(), StatusCode::kInvalidArgument);
  // A boundary that is not stored fails every part.
  const auto absent = ChainKeys({9});
  c = rt_->SaveState(kTestNs, absent[0], two, {});
  (void)c.Wait();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.result(i).message().find("boundary block"), std::string::npos);
  }

  RuntimeOptions too_many = Options(16);
  too_many.state_blocks = 4097;
  EXPECT_EQ(too_many.Validate().code(), StatusCode::kInvalidArgument);
  RuntimeOptions small_hub = Options(2);  // 2 parts and their boundary need 3 blocks
  Status st = small_hub.Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("at least 3 blocks"), std::string::npos) << st.ToString();
  EXPECT_TRUE(Options(3).Validate().ok());
  // An engine pool no larger than a checkpoint leaves no block for KV: every
  // SaveState would be refused, and every lookup cut to nothing.
  RuntimeOptions big_state = Options(128);
  big_state.state_blocks = 64;
  auto refused = Runtime::Open(big_state, setup_.engine);  // a pool of 64 blocks
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString(),
            "invalid_argument: runtime: state_blocks 64 needs an engine pool of more blocks than "
            "that; the copy engine has 64");
  big_state.state_blocks = 63;
  EXPECT_TRUE(Runtime::Open(big_state, setup_.engine).ok());
}

TEST_F(RuntimeStateTest, RemoveTakesTheCheckpointWithItsKey) {
  Open(Options(16));
  const auto keys = ChainKeys({1, 2});
  SaveChain(keys);
  ASSERT_TRUE(SaveStateOf(*rt_, *sim_, keys[1], 20).status().ok());
  ASSERT_EQ(Hits(keys), 2u);
  // The parts hang off keys[1]: without them in the call it would be refused
  // as a block with stored children.
  ASSERT_TRUE(rt_->Remove(kTestNs, {keys.begin() + 1, keys.end()}).ok());
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 1u);
  SaveChain(keys);
  EXPECT_EQ(Hits(keys), 0u) << "the checkpoint came back with its key";
}

// No lower tier: the mover drops what it takes out.
class RuntimeStateEvictionTest : public RuntimeStateTest {
 protected:
  void SetUp() override { OpenWithACheckpoint(/*ssd=*/false); }
};

TEST_F(RuntimeStateEvictionTest, PartsLeaveBeforeTheirBoundary) {
  ASSERT_EQ(Hits(keys_), 2u);
  auto moved = rt_->TEST_RunMoverOnce();
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(*moved, 3u);
  // The last part is the only leaf; then the first part; then keys[1].
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 1u);
  Completion root = sim_->Load({keys_[0]}, 30);
  EXPECT_TRUE(root.status().ok()) << root.status().ToString();
  Completion rest = sim_->Load({keys_[1]}, 31);
  EXPECT_EQ(rest.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Hits(keys_), 0u);
}

TEST_F(RuntimeStateEvictionTest, LookupAndPinHoldsTheCheckpoint) {
  {
    auto pin = rt_->LookupAndPin(kTestNs, keys_);
    ASSERT_TRUE(pin.ok());
    ASSERT_EQ(pin->hit_blocks(), 2u);
    auto moved = rt_->TEST_RunMoverOnce();
    ASSERT_TRUE(moved.ok());
    EXPECT_EQ(*moved, 0u) << "a pinned prefix's checkpoint was evicted";
    EXPECT_TRUE(LoadsState(*rt_, *sim_, keys_[1], 30));
  }
  auto moved = rt_->TEST_RunMoverOnce();
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(*moved, 3u) << "the pin was not released";
}

TEST_F(RuntimeStateTest, ACheckpointDemotesAndLoadsFromALowerTier) {
  OpenWithACheckpoint(/*ssd=*/true);
  const auto& keys = keys_;
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  auto r = rt_->Lookup(kTestNs, keys);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_blocks, 2u);
  EXPECT_EQ(r->tier, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 3u);  // keys[1] and both parts
  EXPECT_TRUE(LoadsState(*rt_, *sim_, keys[1], 30));
}

// The hub admits on a block's second sighting (frequency, threshold 2). A
// checkpoint is asked about as the checkpoint of its boundary, whose
// sightings lookups count; its parts' own keys are never looked up.
TEST_F(RuntimeStateTest, AdmissionSeesTheCheckpointAsItsBoundarys) {
  RuntimeOptions o = Options(16);
  o.tiers[0].admission = {"frequency"};
  Open(o);
  const auto keys = ChainKeys({1, 2});
  SaveChain(keys);
  EXPECT_EQ(Hits(keys), 0u);  // one sighting
  ASSERT_TRUE(SaveStateOf(*rt_, *sim_, keys[1], 20).status().ok());
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.save_not_admitted, 2u);
  EXPECT_EQ(st.tiers[0].admission_rejected_blocks, 1u);
  EXPECT_EQ(Hits(keys), 0u);  // the second sighting
  ASSERT_TRUE(SaveStateOf(*rt_, *sim_, keys[1], 20).status().ok());
  EXPECT_EQ(rt_->Stats().tiers[0].admitted_blocks, 2u);
  EXPECT_EQ(Hits(keys), 2u);
}

// A write budget whose interval allows one block: a policy that answered
// each part would store the first and refuse the second, half a checkpoint
// that no lookup could use. The hub asks once, for the whole checkpoint.
TEST_F(RuntimeStateTest, AWriteBudgetAdmitsACheckpointWholeOrNotAtAll) {
  RuntimeOptions o = Options(16);
  o.clock = std::make_shared<ManualClock>(1000000000ULL);  // one interval throughout
  o.tiers[0].admission = {"write_budget"};
  o.tiers[0].policy.write_budget_bytes_per_day = bb_ * 86400;  // one block per 1 s interval
  Open(o);
  const auto keys = ChainKeys({1, 2});
  SaveChain(keys);
  Completion first = SaveStateOf(*rt_, *sim_, keys[0], 20);
  ASSERT_TRUE(first.status().ok());
  EXPECT_EQ(first.bytes(0) + first.bytes(1), 2 * bb_) << "half a checkpoint was stored";
  Completion second = SaveStateOf(*rt_, *sim_, keys[1], 22);  // the budget is spent
  ASSERT_TRUE(second.status().ok());
  EXPECT_EQ(second.bytes(0) + second.bytes(1), 0u);
  EXPECT_EQ(Hits(keys), 1u);
}

// marconi admission at the hub (Marconi's rule for hybrid models): a
// checkpoint is kept at a request's tail and at a branch point of the
// chains lookups have named, not at a block in the middle of one chain.
TEST_F(RuntimeStateTest, MarconiKeepsCheckpointsAtTailsAndBranchPoints) {
  RuntimeOptions o = Options(32);
  o.tiers[0].admission = {"marconi"};
  Open(o);
  const auto a = ChainKeys({1, 2, 3});
  SaveChain(a);
  EXPECT_EQ(Hits(a), 0u);  // the radix tree learns the chain; a[2] is its tail
  EXPECT_TRUE(SaveStateOf(*rt_, *sim_, a[1], 20).status().ok());
  EXPECT_EQ(rt_->Stats().save_not_admitted, 2u) << "a mid-chain block got a checkpoint";
  EXPECT_TRUE(SaveStateOf(*rt_, *sim_, a[2], 20).status().ok());
  EXPECT_EQ(rt_->Stats().save_not_admitted, 2u) << "the tail's checkpoint was refused";
  EXPECT_EQ(Hits(a), 3u);
  // A second chain leaves a's at a[1]: a[1] becomes a branch point.
  const auto b = ChainKeys({1, 2, 9});
  EXPECT_EQ(Hits(b), 0u);
  EXPECT_TRUE(SaveStateOf(*rt_, *sim_, a[1], 20).status().ok());
  EXPECT_EQ(rt_->Stats().save_not_admitted, 2u) << "the branch point's checkpoint was refused";
  EXPECT_EQ(Hits(b), 2u);
}

// Only a whole checkpoint counts: with its last part gone, a lookup cuts
// the hit (and pins none of it), and the mover drops the first part rather
// than write it to the tier below.
TEST_F(RuntimeStateTest, APartialCheckpointIsNoHitAndItsPartsAreDropped) {
  OpenWithACheckpoint(/*ssd=*/true);
  const auto& keys = keys_;
  const std::vector<BlockKey> parts = PartKeys(keys[1]);
  ASSERT_TRUE(rt_->Remove(kTestNs, std::span(parts).subspan(1)).ok());
  auto pin = rt_->LookupAndPin(kTestNs, keys);
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(pin->hit_blocks(), 0u);
  auto moved = rt_->TEST_RunMoverOnce();  // 3 blocks in a hub of 4, down to 1
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(*moved, 2u) << "something of the cut prefix stayed pinned";
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].blocks, 1u) << "a part without the rest of its checkpoint went down";
  EXPECT_EQ(st.tiers[1].blocks_written, 1u);
}

// Where a request would resume is where its state is: IsSaved and the
// preemption proposals count a saved chain only up to its checkpoint.
TEST_F(RuntimeStateTest, IsSavedAndPreemptionNeedTheCheckpoint) {
  Open(Options(16));
  const auto keys = ChainKeys({1, 2, 3});
  SaveChain(keys);
  EXPECT_FALSE(rt_->IsSaved(kTestNs, keys)) << "a chain without its state cannot resume";
  ASSERT_TRUE(rt_->TrackRequest(7, kTestNs, keys, 3).ok());
  auto victims = rt_->ProposePreemption(1);
  ASSERT_EQ(victims.size(), 1u);
  EXPECT_EQ(victims[0].saved_blocks, 0u);
  ASSERT_TRUE(SaveStateOf(*rt_, *sim_, keys[1], 20).status().ok());
  EXPECT_FALSE(rt_->IsSaved(kTestNs, keys));
  EXPECT_TRUE(rt_->IsSaved(kTestNs, {keys.begin(), keys.begin() + 2}));
  victims = rt_->ProposePreemption(1);
  ASSERT_EQ(victims.size(), 1u);
  EXPECT_EQ(victims[0].saved_blocks, 2u);
  ASSERT_TRUE(SaveStateOf(*rt_, *sim_, keys[2], 20).status().ok());
  EXPECT_TRUE(rt_->IsSaved(kTestNs, keys));
}

class RuntimeStateRestartTest : public DiskViewTest {
 protected:
  // A run saves keys_ = {1, 2, 3} with checkpoints on keys_[1] and keys_[2]
  // (7 blocks in a hub of 8), and a mover pass leaves the root alone in the
  // hub and the rest on the disk. Then a restarted runtime saves the root
  // again, into `rt` and `sim`.
  void RestartWithTwoCheckpointsOnDisk(std::unique_ptr<Runtime>* rt,
                                       std::unique_ptr<SimEngine>* sim) {
    state_blocks_ = kStateBlocks;
    keys_ = ChainKeys({1, 2, 3});
    const TierCapabilities disk{.persistent = true, .local_index = true};
    {
      std::unique_ptr<Runtime> first = OpenOver(8, {.high = 0.5, .low = 0.125}, disk);
      ASSERT_NE(first, nullptr);
      SimEngine s(first.get(), setup_.engine.get());
      s.Prefill(keys_, 0);
      ASSERT_TRUE(s.SaveFrom(keys_, 0, 0).status().ok());
      ASSERT_TRUE(SaveStateOf(*first, s, keys_[1], 20).status().ok());
      ASSERT_TRUE(SaveStateOf(*first, s, keys_[2], 22).status().ok());
      ASSERT_TRUE(first->TEST_RunMoverOnce().ok());
      ASSERT_EQ(disk_->Usage().blocks, 6u);
    }
    *rt = OpenOver(8, {.high = 0.95, .low = 0.85}, disk);
    ASSERT_NE(*rt, nullptr);
    *sim = std::make_unique<SimEngine>(rt->get(), setup_.engine.get());
    (*sim)->Prefill({keys_[0]}, 0);
    ASSERT_TRUE((*sim)->SaveFrom({keys_[0]}, 0, 0).status().ok());
  }
  std::vector<BlockKey> keys_;
};

// After a restart every adopted block has its checkpoint asked for once,
// by the first lookup that needs it: not only the deepest block of the
// lookup that adopted them. Here the first lookup finds the checkpoint at
// the end of the chain; a later one that branches off earlier needs the
// one on keys[1], which that lookup did not ask for.
TEST_F(RuntimeStateRestartTest, EachAdoptedBlocksCheckpointIsFoundWhenNeeded) {
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<SimEngine> simp;
  ASSERT_NO_FATAL_FAILURE(RestartWithTwoCheckpointsOnDisk(&rt, &simp));
  SimEngine& sim = *simp;
  const auto& keys = keys_;
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 3u);
  EXPECT_EQ(rt->Stats().adopted_blocks, 4u);  // keys[1], keys[2] and keys[2]'s parts
  const std::vector<BlockKey> branch = {keys[0], keys[1], ChainKeys({1, 2, 9})[2]};
  EXPECT_EQ(rt->Lookup(kTestNs, branch)->hit_blocks, 2u);
  EXPECT_EQ(rt->Stats().adopted_blocks, 6u);
  EXPECT_TRUE(LoadsState(*rt, sim, keys[1], 30));
}

// Remove reaches a checkpoint the disk holds that no lookup adopted: here
// keys[1]'s, after a lookup that adopted keys[1] and keys[2] and found the
// checkpoint on keys[2]. Left behind, it could be adopted after the Remove.
TEST_F(RuntimeStateRestartTest, RemoveReachesACheckpointNotAdopted) {
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<SimEngine> sim;
  ASSERT_NO_FATAL_FAILURE(RestartWithTwoCheckpointsOnDisk(&rt, &sim));
  EXPECT_EQ(rt->Lookup(kTestNs, keys_)->hit_blocks, 3u);
  EXPECT_EQ(rt->Stats().adopted_blocks, 4u);
  ASSERT_TRUE(rt->Remove(kTestNs, std::span(keys_).subspan(1)).ok());
  EXPECT_EQ(disk_->Usage().blocks, 0u);
}

// A lookup whose keys the index knows asks no lower tier, checkpoint or
// not: a scheduler looking up a waiting request every step must not cost a
// round trip to a shared tier each time.
TEST_F(RuntimeStateRestartTest, ALookupOfIndexedKeysAsksNoTier) {
  state_blocks_ = kStateBlocks;
  size_t contains = 0;
  std::unique_ptr<Runtime> rt =
      OpenOver(16, {.high = 0.95, .low = 0.85}, {.persistent = true, .local_index = true},
               TierViewHooks{.after_contains = [&] { ++contains; }});
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  const auto keys = ChainKeys({1, 2, 3, 4});
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  ASSERT_TRUE(SaveStateOf(*rt, sim, keys[3], 20).status().ok());
  const std::vector<BlockKey> head(keys.begin(), keys.begin() + 2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rt->Lookup(kTestNs, head)->hit_blocks, 0u);
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 4u);
  EXPECT_EQ(contains, 0u);
}

// A run saves a chain of 2 with a checkpoint on its last block, and its
// mover demotes all but the root to the disk. After a restart the root is
// saved again; a lookup finds the rest of the chain and its checkpoint on
// the disk.
TEST_F(RuntimeStateRestartTest, ACheckpointIsAdoptedAfterARestart) {
  state_blocks_ = kStateBlocks;
  const auto keys = ChainKeys({1, 2});
  {
    std::unique_ptr<Runtime> rt =
        OpenOver(4, {.high = 0.5, .low = 0.25}, {.persistent = true, .local_index = true});
    ASSERT_NE(rt, nullptr);
    SimEngine sim(rt.get(), setup_.engine.get());
    sim.Prefill(keys, 0);
    ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
    ASSERT_TRUE(SaveStateOf(*rt, sim, keys[1], 20).status().ok());
    ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
    ASSERT_EQ(disk_->Usage().blocks, 3u);
  }
  std::unique_ptr<Runtime> rt =
      OpenOver(4, {.high = 0.5, .low = 0.25}, {.persistent = true, .local_index = true});
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  sim.Prefill({keys[0]}, 0);
  ASSERT_TRUE(sim.SaveFrom({keys[0]}, 0, 0).status().ok());
  auto r = rt->Lookup(kTestNs, keys);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_blocks, 2u);
  EXPECT_EQ(rt->Stats().adopted_blocks, 3u);
  EXPECT_TRUE(LoadsState(*rt, sim, keys[1], 30));
  // Removing the boundary takes its adopted checkpoint off the disk too.
  ASSERT_TRUE(rt->Remove(kTestNs, std::span(keys).subspan(1)).ok());
  EXPECT_EQ(disk_->Usage().blocks, 0u);
}

// A restart adopts a long chain none of whose blocks has a checkpoint: a
// lookup asks for the checkpoints deepest first, starting questions only
// within one wait, as the chain's adoption waits once. With each question
// taking 20 ms, at most 3 start within the 50 ms wait (asking all 12 would
// hold the lookup 240 ms); the next lookup asks the next ones.
TEST_F(RuntimeStateRestartTest, OneWaitBoundsTheCheckpointsALookupAsksFor) {
  state_blocks_ = kStateBlocks;
  std::vector<uint64_t> ids;
  for (uint64_t i = 1; i <= 13; ++i) ids.push_back(i);
  const auto keys = ChainKeys(ids);
  for (size_t i = 1; i < keys.size(); ++i) {
    std::vector<std::byte> bytes = BlockBytes(keys[i], bb_);
    WriteOp w{keys[i], bytes};
    ASSERT_TRUE(disk_->Write(kTestNs, std::span(&w, 1)).Wait().ok());
  }
  auto asked = std::make_shared<std::atomic<int>>(0);
  TierViewHooks hooks{.instead_of_contains = [asked](size_t n, CompletionSource&) {
    if (n == kStateBlocks) {
      asked->fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }};
  std::unique_ptr<Runtime> rt =
      OpenOver(16, {.high = 0.95, .low = 0.85}, {.persistent = true, .local_index = true}, hooks);
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  sim.Prefill({keys[0]}, 0);
  ASSERT_TRUE(sim.SaveFrom({keys[0]}, 0, 0).status().ok());
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 0u);  // no checkpoint anywhere
  EXPECT_EQ(rt->Stats().adopted_blocks, 12u);
  const int first = asked->load();
  EXPECT_GE(first, 1);
  EXPECT_LE(first, 3) << "a question per adopted block, past the wait";
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 0u);
  EXPECT_GT(asked->load(), first) << "the next lookup asks the checkpoints not asked yet";
}

}  // namespace
}  // namespace kvtier::testing
