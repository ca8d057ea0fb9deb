// A block's last copy lost (the tier answers NotFound) while another caller
// still holds the block: a second load that pinned it, or a PinnedPrefix.
// The holder gets a miss, and the index forgets the block once it lets go;
// another save still gives the block its copy back. Likewise a copy the
// mover finds lost while demoting it.
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <thread>

#include "tests/core/gated_runtime.h"

namespace kvtier::testing {
namespace {

class RuntimeLostCopyTest : public HubOverGateTest {};

// Load B pins K2 and K3 (both below the hub) and, needing two hub slots with
// one free, writes a hub block down to make room: held at the gate. Load A
// takes the free slot for K2, whose read misses, so K2 loses its only copy
// while B still holds it. B must then report K2 missing, not read it from a
// tier it is no longer in (the process crashed there).
TEST_F(RuntimeLostCopyTest, ALoadWhoseBlockLostItsLastCopyMeanwhileMissesIt) {
  const auto x = ChainKeys({20, 21});
  sim_->Prefill(x, 10);
  ASSERT_TRUE(sim_->SaveFrom(x, 0, 10).status().ok());  // the hub: K1, X1, X2 and one free
  sim_->Scrub(0, 64);
  gate_->reads_miss = true;
  gate_->gate_writes = true;
  std::future<void> held = gate_->write_held.get_future();
  const std::vector<BlockKey> k23(keys_.begin() + 1, keys_.begin() + 3);
  const std::vector<uint32_t> b_blocks = {30, 31};
  Completion b = rt_->Load(kTestNs, k23, b_blocks, std::chrono::seconds(10));
  ASSERT_EQ(held.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "load B made no room";
  Completion a = sim_->Load(std::vector<BlockKey>{keys_[1]}, 40);
  EXPECT_EQ(a.result(0).code(), StatusCode::kNotFound) << a.result(0).ToString();
  gate_->open_gate.set_value();
  (void)b.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(b.Poll()) << "load B hung";
  EXPECT_EQ(b.result(0).code(), StatusCode::kNotFound) << b.result(0).ToString();
  EXPECT_EQ(b.result(1).code(), StatusCode::kNotFound) << b.result(1).ToString();
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 1u);
}

// A PinnedPrefix holds the chain while a load finds K2..K4 lost. The entries
// stay while pinned; when the pin goes they must go too, or K1 keeps stored
// children that no lookup reaches and can never be removed alone.
TEST_F(RuntimeLostCopyTest, BlocksThatLostTheirCopyUnderAPinLeaveWithThePin) {
  gate_->reads_miss = true;
  {
    auto pinned = rt_->LookupAndPin(kTestNs, keys_);
    ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
    Completion c = sim_->Load(keys_, 8);
    EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
    for (size_t i = 1; i < keys_.size(); ++i)
      EXPECT_EQ(c.result(i).code(), StatusCode::kNotFound) << i;
    EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 1u);
  }
  EXPECT_TRUE(rt_->Remove(kTestNs, std::span(keys_).first(1)).ok());
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 0u);
}

// A PinnedPrefix holds K1..K4 while a load finds K2..K4 lost; the engine
// computes them again and saves the chain with the pin still held. The save
// must store them, not count them as stored already: the pin holds no copy.
TEST_F(RuntimeLostCopyTest, ASaveGivesBlocksLostUnderAPinTheirCopiesBack) {
  gate_->reads_miss = true;
  auto pinned = rt_->LookupAndPin(kTestNs, keys_);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  Completion c = sim_->Load(keys_, 8);
  for (size_t i = 1; i < keys_.size(); ++i)
    ASSERT_EQ(c.result(i).code(), StatusCode::kNotFound) << i;
  gate_->reads_miss = false;
  sim_->Prefill(keys_, 20);
  Completion saved = sim_->SaveFrom(keys_, 0, 20);
  for (size_t i = 0; i < keys_.size(); ++i) EXPECT_TRUE(saved.result(i).ok()) << i;
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 4u) << "the save stored nothing";
  EXPECT_TRUE(rt_->IsSaved(kTestNs, keys_));
  sim_->Scrub(0, 64);
  Completion back = sim_->Load(keys_, 30);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(back.result(i).ok()) << i << ": " << back.result(i).ToString();
    EXPECT_TRUE(sim_->Holds(30 + i, keys_[i])) << i;
  }
  *pinned = PinnedPrefix();  // lets go of the pin
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 4u) << "the pin's release dropped them";
}

// K2's only copy is lost while K3 hangs off it, so K2 stays as a link. A
// save under K2 as its parent must fail, as for a parent not stored at all:
// it answered OK, and stored X where no lookup reaches it.
TEST_F(RuntimeLostCopyTest, ASaveUnderAParentWhoseCopyWasLostFails) {
  gate_->reads_miss = true;
  Completion lost = sim_->Load(std::vector<BlockKey>{keys_[1]}, 40);
  ASSERT_EQ(lost.result(0).code(), StatusCode::kNotFound) << lost.result(0).ToString();
  gate_->reads_miss = false;
  const BlockKey x = ChainKeys({1, 2, 99})[2];
  sim_->Prefill(std::vector<BlockKey>{x}, 20);
  const std::vector<uint32_t> block{20};
  Completion saved = rt_->Save(kTestNs, keys_[1], std::span(&x, 1), block);
  (void)saved.Wait();
  EXPECT_EQ(saved.result(0).code(), StatusCode::kInvalidArgument) << saved.result(0).ToString();
  EXPECT_NE(saved.result(0).message().find("is not stored"), std::string::npos);
  // Saving the whole chain again gives K2 its copy, and X a parent.
  const std::vector<BlockKey> chain = {keys_[0], keys_[1], x};
  sim_->Prefill(chain, 20);
  ASSERT_TRUE(sim_->SaveFrom(chain, 0, 20).status().ok());
  EXPECT_TRUE(rt_->IsSaved(kTestNs, chain));
}

// As above, with the hub full: the save fails as a whole, so it must not
// make room first (it wrote a hub block down to the gate tier for nothing).
TEST_F(RuntimeLostCopyTest, ASaveUnderALostParentMakesNoRoom) {
  gate_->reads_miss = true;
  Completion lost = sim_->Load(std::vector<BlockKey>{keys_[1]}, 40);
  ASSERT_EQ(lost.result(0).code(), StatusCode::kNotFound) << lost.result(0).ToString();
  gate_->reads_miss = false;
  const auto x = ChainKeys({30, 31, 32});
  sim_->Prefill(x, 10);
  ASSERT_TRUE(sim_->SaveFrom(x, 0, 10).status().ok());  // the hub: K1, X1..X3, full
  ASSERT_EQ(rt_->Lookup(kTestNs, x)->tier, (std::vector<uint8_t>{0, 0, 0}));
  const uint64_t written = gate_->Counters().write_blocks;
  const BlockKey y = ChainKeys({1, 2, 99})[2];
  sim_->Prefill(std::vector<BlockKey>{y}, 20);
  const std::vector<uint32_t> block{20};
  Completion saved = rt_->Save(kTestNs, keys_[1], std::span(&y, 1), block);
  (void)saved.Wait();
  EXPECT_EQ(saved.result(0).code(), StatusCode::kInvalidArgument) << saved.result(0).ToString();
  EXPECT_EQ(gate_->Counters().write_blocks, written) << "room was made for a save that failed";
  EXPECT_EQ(rt_->Lookup(kTestNs, x)->tier, (std::vector<uint8_t>{0, 0, 0}));
}

// Save A hangs N off K4 (below the hub) and, with the hub full, waits at the
// gate for room, holding K4. Meanwhile a load finds K4's last copy lost, and
// save B stores the chain K1..K4, M. A's hold must not hide from B that K4
// needs its copy again: B copies it, and the whole chain stays reachable.
TEST_F(RuntimeLostCopyTest, ASaveHoldingABlockDoesNotHideItsLostCopyFromAnotherSave) {
  const auto x = ChainKeys({20, 21, 22});
  sim_->Prefill(x, 10);
  ASSERT_TRUE(sim_->SaveFrom(x, 0, 10).status().ok());  // the hub: K1, X1..X3, full
  const auto with_n = ChainKeys({1, 2, 3, 4, 6});
  sim_->Prefill(with_n, 20);
  gate_->gate_writes = true;
  std::future<void> held = gate_->write_held.get_future();
  Completion a =
      rt_->Save(kTestNs, keys_[3], std::vector<BlockKey>{with_n[4]}, std::vector<uint32_t>{24});
  ASSERT_EQ(held.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "save A made no room";
  gate_->reads_miss = true;
  Completion lost = sim_->Load(std::vector<BlockKey>{keys_[3]}, 40);
  EXPECT_EQ(lost.result(0).code(), StatusCode::kNotFound) << lost.result(0).ToString();
  gate_->reads_miss = false;

  const auto with_m = ChainKeys({1, 2, 3, 4, 5});
  sim_->Prefill(with_m, 50);
  Completion b = sim_->SaveFrom(with_m, 0, 50);
  gate_->open_gate.set_value();
  (void)a.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(a.Poll()) << "save A hung";
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(b.result(i).ok()) << i;
  EXPECT_EQ(rt_->Lookup(kTestNs, with_m)->hit_blocks, 5u) << "K4 was left without a copy";
  sim_->Scrub(0, 64);  // K4 and M, in the hub, hold B's bytes
  Completion back = sim_->Load(std::vector<BlockKey>{with_m[3], with_m[4]}, 0);
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(back.result(i).ok()) << i << ": " << back.result(i).ToString();
    EXPECT_TRUE(sim_->Holds(i, with_m[3 + i])) << i;
  }
}

// K2 loses its copy below the hub and stays, as a link, for K3 and K4. It
// is saved again with other bytes and demoted: the new bytes must be checked
// against their own checksum when read back, not against the lost copy's.
TEST_F(RuntimeLostCopyTest, ABlockSavedAgainWithOtherBytesLoadsThemAfterDemotion) {
  gate_->reads_miss = true;
  Completion lost = sim_->Load(std::vector<BlockKey>{keys_[1]}, 40);
  ASSERT_EQ(lost.result(0).code(), StatusCode::kNotFound) << lost.result(0).ToString();
  gate_->reads_miss = false;
  const auto other = ChainKeys({77});
  sim_->Prefill(other, 20);  // bytes unlike K2's first copy
  Completion again =
      rt_->Save(kTestNs, keys_[0], std::vector<BlockKey>{keys_[1]}, std::vector<uint32_t>{20});
  ASSERT_TRUE(again.Wait().ok()) << again.result(0).ToString();
  ASSERT_EQ(rt_->Lookup(kTestNs, keys_)->tier, (std::vector<uint8_t>{0, 0, 1, 1}));
  const auto x = ChainKeys({20, 21});
  sim_->Prefill(x, 10);
  ASSERT_TRUE(sim_->SaveFrom(x, 0, 10).status().ok());  // the hub: K1, K2, X1, X2, full
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  ASSERT_EQ(rt_->Lookup(kTestNs, keys_)->tier.at(1), 1) << "K2 was not demoted";
  sim_->Scrub(0, 64);
  Completion back = sim_->Load(std::vector<BlockKey>{keys_[1]}, 40);
  EXPECT_TRUE(back.result(0).ok()) << back.result(0).ToString();
  EXPECT_TRUE(sim_->Holds(40, other[0])) << "not the bytes saved last";
  EXPECT_EQ(rt_->Stats().tiers[1].corruptions, 0u);
}

// Three tiers: hub (4 blocks), the gate tier 1 (8 blocks, marks 0.25 / 0.3)
// and a host tier 2. K2..K4 go to tier 1 and K4 on to tier 2. Then tier 1
// loses every block (its reads miss, as when Redis lets keys expire) and
// three more blocks push it over its high mark.
class RuntimeLostCopyBelowTest : public GatedRuntimeTest {
 protected:
  void SetUp() override {
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 4);
    o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
    o.tiers.push_back(LowerHostTier("gate", bb, 8));
    o.tiers.back().watermarks = {.high = 0.3, .low = 0.25};
    o.tiers.push_back(LowerHostTier("below", bb, 32));
    ASSERT_NO_FATAL_FAILURE(OpenAndDemote(std::move(o), {0, 1, 1, 2}));
  }
};

// The mover picks K3, K2 and K1 (now in tier 1 too) to demote; their reads
// miss. Their copies are gone, so they must be forgotten there, not kept
// (K3 and K2 have children) and rejected again on every pass: lookups would
// go on reporting hits on them, and the tier would never make room.
TEST_F(RuntimeLostCopyBelowTest, AVictimWhoseCopyIsLostIsForgottenNotRejected) {
  const auto x = ChainKeys({20, 21, 22});
  sim_->Prefill(x, 10);
  ASSERT_TRUE(sim_->SaveFrom(x, 0, 10).status().ok());  // the hub: K1, X1..X3, full
  gate_->reads_miss = true;
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  const uint64_t rejected = rt_->Stats().tiers[1].rejected_blocks;
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 0u) << "lost copies still reported";
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[1].rejected_blocks, rejected) << "lost copies rejected again";
  EXPECT_EQ(rejected, 0u);
  // K1..K3 miss; K4, intact in tier 2, still loads (its own bytes).
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys_, 30);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(c.result(i).code(), StatusCode::kNotFound) << i;
  if (c.result(3).ok()) EXPECT_TRUE(sim_->Holds(33, keys_[3]));
  // A save gives the chain its copies back.
  gate_->reads_miss = false;
  sim_->Prefill(keys_, 40);
  ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 40).status().ok());
  EXPECT_EQ(rt_->Lookup(kTestNs, keys_)->hit_blocks, 4u);
}

// A tier that learns it lost copies without a Remove (a kvtier-memd server
// restarted empty) says so through TierContext::copies_lost. The index must
// forget them there: else the hub, still holding K2..K4, drops its copies
// as backed below, and lookups report hits every load misses.
TEST(RuntimeCopiesLostTest, CopiesATierReportsLostAreWrittenDownAgain) {
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 4);
  o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
  o.tiers.push_back(LowerHostTier("below", bb, 32));
  Tier* below = nullptr;
  std::function<void(NamespaceId, std::span<const BlockKey>)> lost;
  o.tier_factory = [&](const TierOptions& t, const TierContext& c) {
    auto tier = CreateTier(t, c);
    if (tier.ok()) below = tier->get();
    lost = c.copies_lost;
    return tier;
  };
  auto rt = Runtime::Open(o, setup.engine);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  ASSERT_TRUE(lost) << "the runtime gave the tier no way to report lost copies";
  SimEngine sim(rt->get(), setup.engine.get());
  const auto keys = ChainKeys({1, 2, 3, 4});
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  ASSERT_TRUE((*rt)->TEST_RunMoverOnce().ok());  // K2..K4 below
  ASSERT_TRUE(sim.Load(keys, 8).status().ok());  // and back in the hub: two copies each
  ASSERT_EQ((*rt)->Lookup(kTestNs, keys)->tier, (std::vector<uint8_t>{0, 0, 0, 0}));

  const std::vector<BlockKey> gone(keys.begin() + 1, keys.end());
  ASSERT_TRUE(below->Remove(kTestNs, gone).Wait().ok());  // the server restarted empty
  lost(kTestNs, gone);
  ASSERT_TRUE((*rt)->TEST_RunMoverOnce().ok());
  EXPECT_EQ(below->Usage().blocks, 3u) << "the hub's copies were dropped, not written down";
  EXPECT_EQ((*rt)->Lookup(kTestNs, keys)->hit_blocks, 4u);
  sim.Scrub(0, 64);
  Completion c = sim.Load(keys, 20);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(c.result(i).ok()) << i << ": " << c.result(i).ToString();
    EXPECT_TRUE(sim.Holds(20 + i, keys[i])) << i;
  }

  // Copies lost with no other copy anywhere leave the index: a miss, not a
  // hit every load fails.
  ASSERT_TRUE((*rt)->TEST_RunMoverOnce().ok());
  ASSERT_EQ((*rt)->Lookup(kTestNs, keys)->tier[3], 1);
  ASSERT_TRUE(below->Remove(kTestNs, std::span(keys).last(1)).Wait().ok());
  lost(kTestNs, std::span(keys).last(1));
  EXPECT_EQ((*rt)->Lookup(kTestNs, keys)->hit_blocks, 3u);
  (*rt)->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
