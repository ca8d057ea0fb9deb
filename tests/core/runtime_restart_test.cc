// A restarted runtime starts with an empty index; blocks a persistent tier
// kept are found again on lookup (adopted) and load byte for byte.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <utility>

#include "tests/core/disk_view_fixture.h"
#include "tests/support/scratch_dir.h"

namespace kvtier::testing {
namespace {

class RuntimeRestartTest : public DiskViewTest {
 protected:
  std::unique_ptr<Runtime> Open(bool local_index, std::function<void()> after_contains = {}) {
    return OpenOver(4, {.high = 0.5, .low = 0.25},
                    TierCapabilities{.persistent = true, .local_index = local_index},
                    TierViewHooks{.after_contains = std::move(after_contains)});
  }

  // A runtime saves the 4-block chain `keys`, demotes all but its root to
  // the disk (4 > 2 blocks: down to 1) and ends, taking the root with it.
  void SaveInARunThatEnds(const std::vector<BlockKey>& keys) {
    std::unique_ptr<Runtime> rt = Open(true);
    ASSERT_NE(rt, nullptr);
    SimEngine sim(rt.get(), setup_.engine.get());
    sim.Prefill(keys, 0);
    ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
    ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
    ASSERT_EQ(disk_->Usage().blocks, 3u);
  }
};

TEST_F(RuntimeRestartTest, PersistentBlocksAreAdoptedAfterARestart) {
  auto keys = ChainKeys({1, 2, 3, 4});
  ASSERT_NO_FATAL_FAILURE(SaveInARunThatEnds(keys));
  // The first runtime is gone, and with it the hub's copy of the root: only
  // blocks 2..4 survive, so a chain lookup (which needs the root) finds none.
  std::unique_ptr<Runtime> rt = Open(true);
  SimEngine sim(rt.get(), setup_.engine.get());
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 0u);
  // Save the root again: the rest of the chain is found below it.
  std::vector<BlockKey> root(keys.begin(), keys.begin() + 1);
  sim.Prefill(root, 0);
  ASSERT_TRUE(sim.SaveFrom(root, 0, 0).status().ok());
  auto found = rt->Lookup(kTestNs, keys);
  ASSERT_EQ(found->hit_blocks, 4u);
  EXPECT_EQ(found->tier, (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(rt->Stats().adopted_blocks, 3u);
  sim.Scrub(0, 64);
  Completion c = sim.Load(keys, 10);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(sim.Holds(10 + i, keys[i])) << i;
}

// Remove reaches copies a persistent tier kept from before the restart,
// adopted or not: removed keys must not come back on the next lookup.
TEST_F(RuntimeRestartTest, RemoveDropsCopiesNotYetAdopted) {
  auto keys = ChainKeys({1, 2, 3, 4});
  ASSERT_NO_FATAL_FAILURE(SaveInARunThatEnds(keys));
  std::unique_ptr<Runtime> rt = Open(true);
  SimEngine sim(rt.get(), setup_.engine.get());
  const std::vector<BlockKey> tail(keys.begin() + 1, keys.end());
  ASSERT_TRUE(rt->Remove(kTestNs, tail).ok());
  EXPECT_EQ(disk_->Usage().blocks, 0u);
  std::vector<BlockKey> root(keys.begin(), keys.begin() + 1);
  sim.Prefill(root, 0);
  ASSERT_TRUE(sim.SaveFrom(root, 0, 0).status().ok());
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 1u) << "removed keys came back";
  EXPECT_EQ(rt->Stats().adopted_blocks, 0u);
}

// A Remove that runs between the tier's Contains answer and the adoption:
// the tier reported the keys, then dropped them. Adopting them would index
// blocks that are gone, and lookups would report hits no load can serve.
TEST_F(RuntimeRestartTest, ARemoveDuringTheContainsStopsTheAdoption) {
  auto keys = ChainKeys({1, 2, 3, 4});
  ASSERT_NO_FATAL_FAILURE(SaveInARunThatEnds(keys));
  const std::vector<BlockKey> tail(keys.begin() + 1, keys.end());
  Runtime* running = nullptr;
  bool armed = false;
  Status removed = Status::Internal("the remove did not run");
  std::unique_ptr<Runtime> rt = Open(true, [&] {
    if (!std::exchange(armed, false)) return;
    removed = running->Remove(kTestNs, tail);
  });
  ASSERT_NE(rt, nullptr);
  running = rt.get();
  SimEngine sim(rt.get(), setup_.engine.get());
  std::vector<BlockKey> root(keys.begin(), keys.begin() + 1);
  sim.Prefill(root, 0);
  ASSERT_TRUE(sim.SaveFrom(root, 0, 0).status().ok());
  armed = true;
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 1u) << "adopted blocks that were removed";
  ASSERT_TRUE(removed.ok()) << removed.ToString();
  EXPECT_EQ(disk_->Usage().blocks, 0u);
  EXPECT_EQ(rt->Stats().adopted_blocks, 0u);
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 1u);
}

// The mover's own eviction can race a lookup: it drops K from the index,
// the lookup misses K and asks the tier, which still holds it, and then the
// Remove lands. Adopting K after that would promise a hit no load serves.
TEST_F(RuntimeRestartTest, ACopyEvictedWhileTheTierIsAskedIsNotAdopted) {
  UseDiskOf(4);
  disk_watermarks_ = WatermarkOptions{.high = 0.5, .low = 0.25};
  std::atomic<bool> remove_armed{true}, contains_armed{false};
  std::promise<void> evicting, answered;
  std::shared_future<void> answered_f = answered.get_future().share();
  std::future<Status> mover;
  TierViewHooks hooks;
  hooks.before_remove = [&] {
    if (!remove_armed.exchange(false)) return;
    evicting.set_value();
    answered_f.wait();
  };
  hooks.after_contains = [&] {
    if (!contains_armed.exchange(false)) return;
    answered.set_value();
    (void)mover.wait_for(std::chrono::seconds(10));  // the Remove lands meanwhile
  };
  std::unique_ptr<Runtime> rt =
      OpenOver(4, {.high = 0.5, .low = 0.25},
               TierCapabilities{.persistent = true, .local_index = true}, std::move(hooks));
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  auto keys = ChainKeys({1, 2, 3, 4});
  sim.Prefill(keys, 0);
  ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  // One pass: A2..A4 go to the disk, which is then over its high mark and
  // evicts A4 and A3; their Remove waits until the lookup has been answered.
  mover = std::async(std::launch::async, [&] { return rt->TEST_RunMoverOnce().status(); });
  ASSERT_EQ(evicting.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  contains_armed = true;
  auto found = rt->Lookup(kTestNs, keys);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->hit_blocks, 2u) << "adopted copies whose remove had landed";
  EXPECT_EQ(rt->Stats().adopted_blocks, 0u);
  ASSERT_TRUE(mover.get().ok());
  EXPECT_EQ(disk_->Usage().blocks, 1u);
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 2u);
  sim.Scrub(0, 64);
  Completion c = sim.Load(std::vector<BlockKey>(keys.begin(), keys.begin() + 2), 10);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  EXPECT_TRUE(sim.Holds(10, keys[0]) && sim.Holds(11, keys[1]));
}

TEST_F(RuntimeRestartTest, TiersWithoutALocalIndexAreNotAsked) {
  auto keys = ChainKeys({7});
  std::vector<BlockKey> one(keys);
  std::vector<std::byte> bytes(bb_, std::byte{1});
  WriteOp w{keys[0], bytes};
  ASSERT_TRUE(disk_->Write(kTestNs, std::span(&w, 1)).Wait().ok());
  std::unique_ptr<Runtime> rt = Open(false);
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 0u);
  rt.reset();
  rt = Open(true);
  EXPECT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 1u);
}

// The real NVMe tier below the hub. Its restarted store holds blocks no one
// claims until the runtime adopts them; what the runtime adopts it must
// account for (and evict itself), or the tier drops it to make room for new
// blocks while lookups still report it.
class RuntimeNvmeRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_ = MakeEngine(64);
    bb_ = setup_.layout.BlockBytes();
  }

  // A hub of 16 blocks that demotes down to `hub_low` blocks once above
  // `hub_high`, over an 8-block NVMe store evicted only to make room.
  std::unique_ptr<Runtime> Open(double hub_high, double hub_low, uint64_t writeback_ms = 0) {
    RuntimeOptions o = MakeOptions(bb_, 16);
    o.mover.shutdown_writeback_ms = writeback_ms;
    o.tiers[0].watermarks = {.high = hub_high / 16, .low = hub_low / 16};
    TierOptions nvme;
    nvme.name = "ssd";
    nvme.type = "nvme";
    nvme.capacity_bytes = 8 * bb_;
    nvme.watermarks = {.high = 1.0, .low = 0.99};
    nvme.path = dir_.path() + "/data";
    nvme.region_bytes = 2 * (bb_ + 4096);  // two blocks, each behind its header page
    o.tiers.push_back(nvme);
    auto rt = Runtime::Open(o, setup_.engine);
    if (rt.status().code() == StatusCode::kNotSupported) return nullptr;
    EXPECT_TRUE(rt.ok()) << rt.status().ToString();
    return rt.ok() ? std::move(rt).value() : nullptr;
  }

  ScratchDir dir_{"kvtier-nvme-restart-"};
  EngineSetup setup_;
  uint64_t bb_ = 0;
};

TEST_F(RuntimeNvmeRestartTest, AdoptedBlocksAreNotDroppedForNewOnes) {
  const auto a = ChainKeys({1, 2, 3, 4, 5, 6, 7, 8, 9});
  {
    // Chain a fills the store: all but its root move down; the root is lost.
    std::unique_ptr<Runtime> rt = Open(8, 1);
    if (rt == nullptr) GTEST_SKIP() << "this build has no nvme tier";
    SimEngine sim(rt.get(), setup_.engine.get());
    sim.Prefill(a, 0);
    ASSERT_TRUE(sim.SaveFrom(a, 0, 0).status().ok());
    ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
    ASSERT_EQ(rt->Stats().tiers[1].blocks, 8u);
  }
  std::unique_ptr<Runtime> rt = Open(4, 2);
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  const std::vector<BlockKey> root(a.begin(), a.begin() + 1);
  sim.Prefill(root, 0);
  ASSERT_TRUE(sim.SaveFrom(root, 0, 0).status().ok());
  ASSERT_EQ(rt->Lookup(kTestNs, a)->hit_blocks, a.size());
  EXPECT_EQ(rt->Stats().adopted_blocks, 8u);
  EXPECT_EQ(rt->Stats().tiers[1].blocks, 8u) << "the adopted blocks count as used";

  // Chain b pushes blocks down into the full store: room is made there by
  // the runtime's eviction, which forgets what it drops.
  const auto b = ChainKeys({101, 102, 103, 104});
  sim.Prefill(b, 16);
  ASSERT_TRUE(sim.SaveFrom(b, 0, 16).status().ok());
  ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
  EXPECT_GT(rt->Stats().tiers[1].demoted_blocks + rt->Stats().tiers[0].demoted_blocks, 0u);

  const size_t hits = rt->Lookup(kTestNs, a)->hit_blocks;
  EXPECT_GT(hits, 1u) << "the runtime evicted all of chain a";
  sim.Scrub(0, 64);
  const std::vector<BlockKey> found(a.begin(), a.begin() + static_cast<ptrdiff_t>(hits));
  Completion c = sim.Load(found, 32);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < hits; ++i) EXPECT_TRUE(sim.Holds(32 + i, a[i])) << i;
}

// mover.shutdown_writeback_ms over the real store: blocks that never left
// the hub are on the SSD after the shutdown, and the restarted runtime
// adopts and loads them, byte for byte.
TEST_F(RuntimeNvmeRestartTest, ShutdownWritebackPutsTheHubOnTheSsd) {
  const auto a = ChainKeys({1, 2, 3, 4, 5});
  {
    std::unique_ptr<Runtime> rt = Open(16, 8, 10000);
    if (rt == nullptr) GTEST_SKIP() << "this build has no nvme tier";
    SimEngine sim(rt.get(), setup_.engine.get());
    sim.Prefill(a, 0);
    ASSERT_TRUE(sim.SaveFrom(a, 0, 0).status().ok());
    ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
    ASSERT_EQ(rt->Stats().tiers[1].blocks, 0u);
  }
  std::unique_ptr<Runtime> rt = Open(16, 8);
  ASSERT_NE(rt, nullptr);
  // Before a lookup adopts them the store's blocks are not used space, and
  // the stats say where they are (an operator saw an empty tier).
  TierStats ssd = rt->Stats().tiers[1];
  EXPECT_EQ(ssd.blocks, 0u);
  EXPECT_EQ(ssd.used_bytes, 0u);
  EXPECT_EQ(ssd.unclaimed_blocks, a.size());
  EXPECT_EQ(ssd.unclaimed_bytes, a.size() * bb_);
  auto found = rt->Lookup(kTestNs, a);
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->hit_blocks, a.size());
  EXPECT_EQ(found->tier, std::vector<uint8_t>(a.size(), 1));
  EXPECT_EQ(rt->Stats().adopted_blocks, a.size());
  ssd = rt->Stats().tiers[1];
  EXPECT_EQ(ssd.blocks, a.size());
  EXPECT_EQ(ssd.unclaimed_blocks, 0u);
  EXPECT_EQ(ssd.unclaimed_bytes, 0u);
  SimEngine sim(rt.get(), setup_.engine.get());
  sim.Scrub(0, 64);
  Completion c = sim.Load(a, 32);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < a.size(); ++i) EXPECT_TRUE(sim.Holds(32 + i, a[i])) << i;
}

}  // namespace
}  // namespace kvtier::testing
