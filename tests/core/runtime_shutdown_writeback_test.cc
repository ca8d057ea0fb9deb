// Shutdown with mover.shutdown_writeback_ms: the blocks only the hub holds
// are written to the persistent tier below it, so a restarted runtime finds
// them there; the tier's admission still decides, parents go before their
// children, and no batch starts past the deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "tests/core/disk_view_fixture.h"

namespace kvtier::testing {
namespace {

// Holds the disk's Removes (TierViewHooks::before_remove) until released.
struct RemoveGate {
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, released = false;

  // The hook: a Remove waits in it until Release(), at most `limit`.
  std::function<void()> Hook(std::chrono::seconds limit) {
    return [this, limit] {
      std::unique_lock lock(mu);
      held = true;
      cv.notify_all();
      cv.wait_for(lock, limit, [&] { return released; });
    };
  }
  bool WaitHeld() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return held; });
  }
  // Releases the held Removes `after` from now, on a thread of its own.
  std::thread ReleaseAfter(std::chrono::milliseconds after) {
    return std::thread([this, after] {
      std::this_thread::sleep_for(after);
      std::lock_guard lock(mu);
      released = true;
      cv.notify_all();
    });
  }
};

class ShutdownWritebackTest : public DiskViewTest {
 protected:
  // A hub of 8 blocks (the mover leaves 4 alone) over the persistent disk,
  // taking `batch` blocks per write; `before_write` runs before each write.
  std::unique_ptr<Runtime> Open(std::function<Status()> before_write = {}, uint32_t batch = 64) {
    return OpenOver(
        8, {.high = 0.95, .low = 0.9},
        TierCapabilities{.persistent = true, .local_index = true, .max_batch_blocks = batch},
        TierViewHooks{.before_write = std::move(before_write)});
  }

  // Saves `keys` into the hub of `rt` from engine block 0.
  void Save(Runtime* rt, const std::vector<BlockKey>& keys) {
    SimEngine sim(rt, setup_.engine.get());
    sim.Prefill(keys, 0);
    ASSERT_TRUE(sim.SaveFrom(keys, 0, 0).status().ok());
  }

  // Saves `k`, has a Remove of it held in the disk by `gate`, saves `k`
  // again and then `more`, and shuts `rt` down, the Remove released
  // `release_after` after the shutdown began.
  void ShutDownWithARemoveHeld(Runtime* rt, RemoveGate& gate, const std::vector<BlockKey>& k,
                               const std::vector<BlockKey>& more,
                               std::chrono::milliseconds release_after) {
    ASSERT_NO_FATAL_FAILURE(Save(rt, k));
    std::thread remover([&] { (void)rt->Remove(kTestNs, k); });
    const bool held = gate.WaitHeld();
    if (held) {
      Save(rt, k);
      if (!more.empty()) Save(rt, more);
    }
    std::thread releaser = gate.ReleaseAfter(held ? release_after : std::chrono::milliseconds(0));
    rt->Shutdown();
    releaser.join();
    remover.join();
    ASSERT_TRUE(held) << "the Remove never reached the disk";
  }

  // A (1..4) fills a disk of 4 blocks that the mover leaves full, and is
  // read back, so the hub holds it too; B (5, 6) continues A in the hub
  // alone; then the runtime shuts down, writing the hub back.
  void ShutDownWithAFullDiskUnderB() {
    shutdown_writeback_ms_ = 10000;
    ASSERT_NO_FATAL_FAILURE(UseDiskOf(4));
    disk_watermarks_ = WatermarkOptions{.high = 1.0, .low = 0.9};
    const auto keys = ChainKeys({1, 2, 3, 4, 5, 6});
    const std::vector<BlockKey> a(keys.begin(), keys.begin() + 4);
    std::unique_ptr<Runtime> rt = OpenOver(
        8, {.high = 0.2, .low = 0.1}, TierCapabilities{.persistent = true, .local_index = true});
    ASSERT_NE(rt, nullptr);
    SimEngine sim(rt.get(), setup_.engine.get());
    sim.Prefill(keys, 0);
    ASSERT_TRUE(sim.SaveFrom(a, 0, 0).status().ok());
    for (int pass = 0; pass < 4 && rt->Stats().tiers[0].blocks > 0; ++pass) {
      ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
    }
    ASSERT_EQ(disk_->Usage().blocks, 4u);
    ASSERT_EQ(rt->Stats().tiers[0].blocks, 0u);
    ASSERT_TRUE(sim.Load(a, 20).status().ok());
    ASSERT_EQ(rt->Stats().tiers[0].blocks, 4u) << "A read back keeps its hub copy";
    ASSERT_TRUE(sim.SaveFrom(keys, 4, 0).status().ok());
    rt->Shutdown();
  }

  // After a restart: the blocks of `keys` a lookup finds, each in the disk
  // and loaded byte for byte.
  size_t FoundOnDiskAfterRestart(const std::vector<BlockKey>& keys) {
    std::unique_ptr<Runtime> rt = Open();
    EXPECT_NE(rt, nullptr);
    if (rt == nullptr) return 0;
    auto found = rt->Lookup(kTestNs, keys);
    EXPECT_TRUE(found.ok());
    const size_t hits = found->hit_blocks;
    for (size_t i = 0; i < hits; ++i) EXPECT_EQ(found->tier[i], 1u) << i;
    SimEngine sim(rt.get(), setup_.engine.get());
    sim.Scrub(0, 64);
    const std::vector<BlockKey> hit(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(hits));
    Completion c = sim.Load(hit, 20);
    EXPECT_TRUE(c.status().ok()) << c.status().ToString();
    for (uint32_t i = 0; i < hits; ++i) EXPECT_TRUE(sim.Holds(20 + i, keys[i])) << i;
    return hits;
  }
};

TEST_F(ShutdownWritebackTest, TheHubsBlocksSurviveARestartOnlyWhenAsked) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  for (uint64_t ms : {uint64_t{0}, uint64_t{10000}}) {
    SCOPED_TRACE(ms);
    shutdown_writeback_ms_ = ms;
    std::unique_ptr<Runtime> rt = Open();
    ASSERT_NE(rt, nullptr);
    ASSERT_NO_FATAL_FAILURE(Save(rt.get(), keys));
    ASSERT_EQ(disk_->Usage().blocks, 0u) << "the mover wrote blocks down before the shutdown";
    rt->Shutdown();
    EXPECT_EQ(disk_->Usage().blocks, ms == 0 ? 0u : 4u);
    EXPECT_EQ(rt->Stats().tiers[0].demoted_blocks, ms == 0 ? 0u : 4u);
    rt.reset();
    EXPECT_EQ(FoundOnDiskAfterRestart(keys), ms == 0 ? 0u : 4u);
  }
}

// Blocks 1 and 2 are named twice, block 3 once: frequency (2nd sighting)
// admits only the first two, and a block already below is not written again.
TEST_F(ShutdownWritebackTest, TheDisksAdmissionDecides) {
  shutdown_writeback_ms_ = 10000;
  disk_admission_ = {"frequency"};
  const auto keys = ChainKeys({1, 2, 3});
  std::unique_ptr<Runtime> rt = Open();
  ASSERT_NE(rt, nullptr);
  ASSERT_EQ(rt->Lookup(kTestNs, keys)->hit_blocks, 0u);
  ASSERT_NO_FATAL_FAILURE(Save(rt.get(), keys));
  const std::vector<BlockKey> two(keys.begin(), keys.begin() + 2);
  ASSERT_EQ(rt->Lookup(kTestNs, two)->hit_blocks, 2u);
  rt->Shutdown();
  EXPECT_EQ(disk_->Usage().blocks, 2u);
  RuntimeStats st = rt->Stats();
  EXPECT_EQ(st.tiers[1].admitted_blocks, 2u);
  EXPECT_EQ(st.tiers[1].admission_rejected_blocks, 1u);
  rt.reset();
  EXPECT_EQ(FoundOnDiskAfterRestart(keys), 2u);
}

// Writes take 200 ms and the writeback may take 50: the first batch (the
// root: one block per batch) is written, then no batch starts. What is below
// is a prefix a restart finds.
TEST_F(ShutdownWritebackTest, NoBatchStartsPastTheDeadlineAndParentsGoFirst) {
  shutdown_writeback_ms_ = 50;
  const auto keys = ChainKeys({1, 2, 3, 4});
  std::atomic<int> writes{0};
  std::unique_ptr<Runtime> rt = Open(
      [&] {
        ++writes;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return Status::Ok();
      },
      1);
  ASSERT_NE(rt, nullptr);
  ASSERT_NO_FATAL_FAILURE(Save(rt.get(), keys));
  rt->Shutdown();
  EXPECT_EQ(writes.load(), 1);
  EXPECT_EQ(disk_->Usage().blocks, 1u);
  rt.reset();
  EXPECT_EQ(FoundOnDiskAfterRestart(keys), 1u);
}

// A hybrid model's checkpoint of block 1 (two parts) is written part by
// part, 200 ms a write, with 300 ms to do it: block 1 and the first part go
// before the deadline. The second part goes past it, so a restart finds the
// checkpoint whole; before, the deadline left the first part alone on disk,
// of no use to any lookup.
TEST_F(ShutdownWritebackTest, ADeadlineNeverSplitsACheckpoint) {
  shutdown_writeback_ms_ = 300;
  state_blocks_ = 2;
  const auto keys = ChainKeys({1});
  const KeyHasher hasher(kTestNs, HashAlgorithm::kXxh3_128);
  const std::vector<BlockKey> parts = {hasher.StatePart(keys[0], 0), hasher.StatePart(keys[0], 1)};
  std::atomic<int> writes{0};
  auto slow = [&] {
    ++writes;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return Status::Ok();
  };
  std::unique_ptr<Runtime> rt = Open(slow, 1);
  ASSERT_NE(rt, nullptr);
  ASSERT_NO_FATAL_FAILURE(Save(rt.get(), keys));
  SimEngine sim(rt.get(), setup_.engine.get());
  sim.Prefill(parts, 8);
  const std::vector<uint32_t> state_pages = {8, 9};
  ASSERT_TRUE(rt->SaveState(kTestNs, keys[0], state_pages, SaveOptions{}).Wait().ok());
  rt->Shutdown();
  EXPECT_EQ(writes.load(), 3);
  EXPECT_EQ(disk_->Usage().blocks, 3u);
  rt.reset();

  std::unique_ptr<Runtime> again = Open();
  ASSERT_NE(again, nullptr);
  auto found = again->Lookup(kTestNs, keys);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->hit_blocks, 1u);
  SimEngine after(again.get(), setup_.engine.get());
  after.Scrub(0, 64);
  const std::vector<uint32_t> load_pages = {20, 21};
  Completion c = again->LoadState(kTestNs, keys[0], load_pages, std::chrono::seconds(10));
  ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
  EXPECT_TRUE(after.Holds(20, parts[0]));
  EXPECT_TRUE(after.Holds(21, parts[1]));
}

// The first write, one of the two roots, fails: that root's children would
// be unreachable below, so none is written; the other chain goes down whole.
TEST_F(ShutdownWritebackTest, NoBlockIsWrittenBelowAParentThatIsNot) {
  shutdown_writeback_ms_ = 10000;
  const auto a = ChainKeys({1, 2, 3});
  const auto b = ChainKeys({7, 8, 9});
  int writes = 0;
  std::unique_ptr<Runtime> rt =
      Open([&] { return ++writes == 1 ? Status::IOError("injected") : Status::Ok(); }, 1);
  ASSERT_NE(rt, nullptr);
  ASSERT_NO_FATAL_FAILURE(Save(rt.get(), a));
  ASSERT_NO_FATAL_FAILURE(Save(rt.get(), b));
  rt->Shutdown();
  EXPECT_EQ(writes, 4);  // the failed root, then the other chain's three blocks
  EXPECT_EQ(disk_->Usage().blocks, 3u);
  rt.reset();
  const size_t found_a = FoundOnDiskAfterRestart(a);
  const size_t found_b = FoundOnDiskAfterRestart(b);
  EXPECT_EQ(std::min(found_a, found_b), 0u);
  EXPECT_EQ(std::max(found_a, found_b), 3u);
}

// One batch holds the chain, root first, and the write of its second block
// fails while the others succeed: a lookup stops at the missing block, so
// the two written below it are removed again, not left taking room no
// lookup can reach.
TEST_F(ShutdownWritebackTest, BlocksWrittenBelowAParentWhoseWriteFailedAreRemoved) {
  shutdown_writeback_ms_ = 10000;
  const auto keys = ChainKeys({1, 2, 3, 4});
  std::unique_ptr<Runtime> rt = OpenOver(
      8, {.high = 0.95, .low = 0.9}, TierCapabilities{.persistent = true, .local_index = true},
      TierViewHooks{.write_op_status = [&](const BlockKey& k) {
        return k == keys[1] ? Status::IOError("injected") : Status::Ok();
      }});
  ASSERT_NE(rt, nullptr);
  ASSERT_NO_FATAL_FAILURE(Save(rt.get(), keys));
  rt->Shutdown();
  EXPECT_EQ(disk_->Usage().blocks, 1u) << "blocks no lookup can reach stayed in the disk";
  EXPECT_EQ(rt->Stats().tiers[0].demoted_blocks, 1u);
  rt.reset();
  EXPECT_EQ(FoundOnDiskAfterRestart(keys), 1u);
}

// A Remove of K is still running in the disk (held there) when K, saved
// again, is written back at shutdown: written first, K's new copy was taken
// by the Remove landing after it, and a restart found nothing. The
// writeback waits for the Remove, then writes K.
TEST_F(ShutdownWritebackTest, AWritebackWaitsForARemoveOfTheKeyStillRunningBelow) {
  shutdown_writeback_ms_ = 10000;
  const auto keys = ChainKeys({1});
  RemoveGate gate;
  std::unique_ptr<Runtime> rt = OpenOver(
      8, {.high = 0.95, .low = 0.9}, TierCapabilities{.persistent = true, .local_index = true},
      TierViewHooks{.before_remove = gate.Hook(std::chrono::seconds(5))});
  ASSERT_NE(rt, nullptr);
  ASSERT_NO_FATAL_FAILURE(
      ShutDownWithARemoveHeld(rt.get(), gate, keys, {}, std::chrono::milliseconds(200)));
  EXPECT_EQ(disk_->Usage().blocks, 1u) << "the Remove took the copy written at shutdown";
  rt.reset();
  EXPECT_EQ(FoundOnDiskAfterRestart(keys), 1u);
}

// A Remove of K that hangs for the whole shutdown: K's batch waits half of
// the writeback's time for it, not all of it, and the batches after it (the
// chain Y, one block a batch) are still written.
TEST_F(ShutdownWritebackTest, ARemoveThatHangsCostsTheWritebackHalfItsTimeAtMost) {
  shutdown_writeback_ms_ = 600;
  const auto k = ChainKeys({1});
  const auto y = ChainKeys({5, 6});
  RemoveGate gate;
  std::unique_ptr<Runtime> rt =
      OpenOver(8, {.high = 0.95, .low = 0.9},
               TierCapabilities{.persistent = true, .local_index = true, .max_batch_blocks = 1},
               TierViewHooks{.before_remove = gate.Hook(std::chrono::seconds(10))});
  ASSERT_NE(rt, nullptr);
  // Released past the deadline: the tiers' shutdown waits for it.
  ASSERT_NO_FATAL_FAILURE(
      ShutDownWithARemoveHeld(rt.get(), gate, k, y, std::chrono::milliseconds(1500)));
  EXPECT_EQ(disk_->Usage().blocks, 2u) << "Y was not written";
  rt.reset();
  EXPECT_EQ(FoundOnDiskAfterRestart(y), 2u);
  EXPECT_EQ(FoundOnDiskAfterRestart(k), 0u);
}

// The disk is full with A (1..4), which the hub holds too (read back); B
// (5, 6) continues A in the hub alone. Making room for B evicted A's leaves
// from the disk, counting their hub copies, which end with the process: the
// disk kept 1, 2, 5, 6, and a restart found two blocks where it had four.
// The hub's copies no longer count, and nothing may leave: B is not written.
TEST_F(ShutdownWritebackTest, AFullDiskKeepsTheParentsOfWhatItWouldWrite) {
  ASSERT_NO_FATAL_FAILURE(ShutDownWithAFullDiskUnderB());
  EXPECT_EQ(disk_->Usage().blocks, 4u);
  EXPECT_EQ(FoundOnDiskAfterRestart(ChainKeys({1, 2, 3, 4, 5, 6})), 4u);
}

// A save that needs hub room demotes A3 while the disk holds its writes:
// the write outlasts the save's wait and is handed over, A3 still moving.
// C4, saved under A3 meanwhile, is only in the hub at Shutdown. The
// writeback took its list at once, without A3 (moving), so C4 had no parent
// below and was not written, although A3's write landed right after. It
// now waits for handed-over writes first.
TEST_F(ShutdownWritebackTest, AWritebackWaitsForAHandedOverWriteOfAParent) {
  shutdown_writeback_ms_ = 10000;
  auto stall = std::make_shared<CallStall>();
  disk_faults_ = FaultOptions{.stall_writes = stall};
  const auto keys = ChainKeys({1, 2, 3, 4});
  const auto y = ChainKeys({20});
  const auto x = ChainKeys({30});
  std::unique_ptr<Runtime> rt = OpenOver(4, {.high = 0.95, .low = 0.9},
                                         TierCapabilities{.persistent = true, .local_index = true});
  ASSERT_NE(rt, nullptr);
  SimEngine sim(rt.get(), setup_.engine.get());
  sim.Prefill(keys, 0);
  sim.Prefill(y, 10);
  sim.Prefill(x, 11);
  ASSERT_TRUE(
      sim.SaveFrom(std::vector<BlockKey>(keys.begin(), keys.begin() + 3), 0, 0).status().ok());
  ASSERT_TRUE(sim.SaveFrom(y, 0, 10).status().ok());  // the hub is full
  stall->Stall();
  (void)sim.SaveFrom(x, 0, 11);  // demotes A3, the oldest leaf; handed over after 1 s
  ASSERT_EQ(stall->held(), 1u);
  ASSERT_TRUE(rt->Remove(kTestNs, y).ok());  // room for C4
  ASSERT_TRUE(sim.SaveFrom(keys, 3, 0).status().ok());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stall->Release();
  });
  rt->Shutdown();
  releaser.join();
  rt.reset();
  disk_faults_.reset();
  EXPECT_EQ(FoundOnDiskAfterRestart(keys), 4u);
}

// The same with a tier below the disk whose writes fail: the disk's A3 and
// A4, evicted to make room for B, were dropped although the copies they
// were counted for (in the hub) end with the process, and B then had no
// parent below and went too: a restart found two blocks. A3 and A4 are
// now written below as the parents of B, and kept on the disk when that
// fails.
TEST_F(ShutdownWritebackTest, AFullDiskKeepsTheParentsOfWhatItWouldWriteOverATierBelow) {
  failing_tier_below_ = true;
  ASSERT_NO_FATAL_FAILURE(ShutDownWithAFullDiskUnderB());
  failing_tier_below_ = false;
  EXPECT_EQ(FoundOnDiskAfterRestart(ChainKeys({1, 2, 3, 4, 5, 6})), 4u);
}

}  // namespace
}  // namespace kvtier::testing
