// A restarted runtime starts with an empty index; blocks a persistent tier
// kept are found again on lookup (adopted) and load byte for byte.
#include <gtest/gtest.h>

#include <functional>
#include <utility>

#include "tests/core/disk_view_fixture.h"

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

}  // namespace
}  // namespace kvtier::testing
