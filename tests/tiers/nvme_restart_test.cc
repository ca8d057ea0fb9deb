// The NVMe tier after a restart: recovered blocks stay unclaimed (left out of
// Usage) until this run claims, reads, rewrites or removes them, and a write
// that finds the tier full drops the oldest unclaimed ones instead of failing
// (only when that makes room). Also: the capacity check of a write that had
// to wait for a reclaim.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "tests/support/block_data.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::NvmeTier;
using internal::OpenNvmeTier;

constexpr NamespaceId kNs = kNvmeNs;
// Three blocks fill a region; 12 blocks of capacity give 6 regions: 4 full
// ones after the first fill, the spare and one free region.
constexpr uint64_t kBytes = 16 * 1024, kDisk = 20 * 1024, kBlocks = 12;

TierOptions Options(const ScratchDir& dir) {
  return NvmeOptions(dir.path(), kBlocks, kBytes, 3 * kDisk);
}

std::unique_ptr<NvmeTier> Open(const TierOptions& o) {
  auto t = OpenNvmeTier(o, TierContext{kBytes});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Fills a fresh store with blocks 0..11 and closes it.
void FillAndClose(const TierOptions& o) {
  std::unique_ptr<NvmeTier> t = Open(o);
  ASSERT_NE(t, nullptr);
  WriteBlocks(*t, 0, kBlocks, kBytes);
  t->Shutdown();
}

Status WriteOne(Tier& t, uint64_t i, uint64_t bytes = kBytes) {
  const std::vector<std::byte> data = BlockBytes(TestKey(i), bytes);
  WriteOp w{TestKey(i), data};
  return t.Write(kNs, std::span(&w, 1)).Wait();
}

Status RemoveOne(Tier& t, uint64_t i) {
  const BlockKey key = TestKey(i);
  return t.Remove(kNs, std::span(&key, 1)).Wait();
}

// Contains claims nothing: the runtime asks about keys past the run it
// adopts, and claims only that run (Tier::Claim).
bool Present(Tier& t, uint64_t i) {
  const BlockKey key = TestKey(i);
  Completion c = t.Contains(kNs, std::span(&key, 1));
  (void)c.Wait();
  EXPECT_TRUE(c.result(0).ok() || c.result(0).code() == StatusCode::kNotFound)
      << c.result(0).ToString();
  return c.result(0).ok();
}

void ExpectPresent(Tier& t, std::initializer_list<uint64_t> blocks, bool present) {
  for (uint64_t i : blocks) EXPECT_EQ(Present(t, i), present) << "block " << i;
}

// Each test starts from a store filled with blocks 0..11 and closed.
class NvmeUnclaimed : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    options_ = Options(dir_);
    ASSERT_NO_FATAL_FAILURE(FillAndClose(options_));
  }
  ScratchDir dir_;
  TierOptions options_;
};

TEST_F(NvmeUnclaimed, RecoveredBlocksAreFreeSpaceUntilUsed) {
  std::unique_ptr<NvmeTier> t = Open(options_);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Stats().recovered_blocks, kBlocks);
  EXPECT_EQ(t->Usage().capacity_bytes, kBlocks * kBytes);
  EXPECT_EQ(t->Usage().used_bytes, 0u);
  EXPECT_EQ(t->Usage().blocks, 0u);
  ExpectPresent(*t, {0, 5, 11}, true);
  EXPECT_EQ(t->Usage().blocks, 0u) << "Contains claims nothing";

  ASSERT_TRUE(ReadAndCheck(*t, 5, kBytes).ok());
  EXPECT_EQ(t->Usage().used_bytes, kBytes);
  EXPECT_EQ(t->Usage().blocks, 1u);
  ASSERT_TRUE(ReadAndCheck(*t, 5, kBytes).ok());
  EXPECT_EQ(t->Usage().blocks, 1u) << "a second read claims nothing more";

  WriteBlocks(*t, 7, 1, kBytes, 1);  // a rewrite claims the new version
  EXPECT_EQ(t->Usage().blocks, 2u);
  const BlockKey nine = TestKey(9);
  ASSERT_TRUE(t->Remove(kNs, std::span(&nine, 1)).Wait().ok());
  EXPECT_EQ(t->Usage().blocks, 2u);
  EXPECT_EQ(t->Usage().used_bytes, 2 * kBytes);
  t->Shutdown();

  t = Open(options_);  // everything recovered starts unclaimed again
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Stats().recovered_blocks, kBlocks - 1);
  EXPECT_EQ(t->Usage().blocks, 0u);
  EXPECT_TRUE(ReadAndCheck(*t, 7, kBytes, 1).ok());
  EXPECT_EQ(t->Usage().blocks, 1u);
  t->Shutdown();
}

// What the runtime adopts it claims: the claimed blocks count as used and
// are never dropped to make room; the rest still are, oldest first.
TEST_F(NvmeUnclaimed, ClaimedBlocksCountAsUsedAndAreNotDropped) {
  std::unique_ptr<NvmeTier> t = Open(options_);
  ASSERT_NE(t, nullptr);
  const std::vector<BlockKey> adopted = {TestKey(0), TestKey(1), TestKey(999)};  // 999: absent
  t->Claim(kNs, adopted);
  EXPECT_EQ(t->Usage().blocks, 2u);
  EXPECT_EQ(t->Usage().used_bytes, 2 * kBytes);
  t->Claim(kNs, adopted);
  EXPECT_EQ(t->Usage().blocks, 2u) << "a second claim counts nothing more";
  t->Claim(NamespaceId{kNs.value + 1}, adopted);
  EXPECT_EQ(t->Usage().blocks, 2u) << "another namespace's keys are not these";
  for (uint64_t i = 100; i < 110; ++i) ASSERT_TRUE(WriteOne(*t, i).ok()) << i;
  EXPECT_EQ(t->Stats().unclaimed_dropped, 10u);
  ExpectPresent(*t, {0, 1}, true);
  ExpectPresent(*t, {2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, false);
  EXPECT_EQ(t->Usage().blocks, kBlocks);
  EXPECT_EQ(WriteOne(*t, 110).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(ReadAndCheck(*t, 0, kBytes).ok());
  EXPECT_TRUE(ReadAndCheck(*t, 1, kBytes).ok());
  t->Shutdown();
  t->Claim(kNs, adopted);  // after Shutdown: a no-op
}

// A write that would not fit even with every unclaimed block gone is
// refused without dropping any of them.
TEST(NvmeUnclaimedRoom, WriteThatCannotFitDropsNoUnclaimedBlock) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = Options(dir);
  {
    std::unique_ptr<NvmeTier> t = Open(o);
    ASSERT_NE(t, nullptr);
    WriteBlocks(*t, 0, kBlocks - 1, kBytes);
    ASSERT_TRUE(WriteOne(*t, 11, 4096).ok());
    t->Shutdown();
  }
  std::unique_ptr<NvmeTier> t = Open(o);
  ASSERT_NE(t, nullptr);
  std::vector<BlockKey> big;
  for (uint64_t i = 0; i < kBlocks - 1; ++i) big.push_back(TestKey(i));
  t->Claim(kNs, big);
  ASSERT_TRUE(WriteOne(*t, 50, 8192).ok());  // fits beside unclaimed block 11
  // 11 blocks and 8 KiB in use: 16 KiB more would not fit even without the
  // 4 KiB of block 11.
  EXPECT_EQ(WriteOne(*t, 51, kBytes).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(t->Stats().unclaimed_dropped, 0u);
  ExpectPresent(*t, {11}, true);
  // 4 KiB more fits once block 11 is gone.
  EXPECT_TRUE(WriteOne(*t, 52, 4096).ok());
  EXPECT_EQ(t->Stats().unclaimed_dropped, 1u);
  ExpectPresent(*t, {11}, false);
  t->Shutdown();
}

// Two writes that each fit but not both: the second passed the capacity
// check, then had to reclaim, and the first took the room meanwhile. The
// check is made again once the reclaim is done.
TEST(NvmeCapacity, WriteThatWaitedForReclaimChecksTheCapacityAgain) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  // 3 blocks of 16 KiB (20 KiB on disk): 3 regions of 3, one the spare.
  std::unique_ptr<NvmeTier> t = Open(NvmeOptions(dir.path(), 3, kBytes, 3 * kDisk));
  ASSERT_NE(t, nullptr);
  WriteBlocks(*t, 0, 3, kBytes);  // the first region; blocks 1, 2 then go
  ASSERT_TRUE(RemoveOne(*t, 1).ok());
  ASSERT_TRUE(RemoveOne(*t, 2).ok());
  ASSERT_TRUE(WriteOne(*t, 3, 12 * 1024).ok());  // 16 KiB on disk, in the second region
  ASSERT_TRUE(WriteOne(*t, 4, kBytes).ok());
  ASSERT_TRUE(RemoveOne(*t, 4).ok());
  ASSERT_TRUE(WriteOne(*t, 5, 4096).ok());
  ASSERT_TRUE(RemoveOne(*t, 5).ok());
  // 28 KiB of 48 in use; the active region has 16 KiB left, no region is
  // free: a 16 KiB block must reclaim, an 8 KiB one goes in at once.
  bool fired = false;
  Status during;
  t->TEST_SetBeforeReclaim([&] {
    if (std::exchange(fired, true)) return;
    during = WriteOne(*t, 6, 8192);
  });
  const Status late = WriteOne(*t, 7, kBytes);
  t->TEST_SetBeforeReclaim(nullptr);
  ASSERT_TRUE(fired);
  EXPECT_TRUE(during.ok()) << during.ToString();
  EXPECT_EQ(late.code(), StatusCode::kResourceExhausted) << late.ToString();
  EXPECT_LE(t->Usage().used_bytes, t->Usage().capacity_bytes);
  EXPECT_EQ(t->Usage().used_bytes, 28 * 1024 + 8192u);
  EXPECT_TRUE(ReadAndCheck(*t, 6, 8192).ok());
  EXPECT_TRUE(ReadAndCheck(*t, 0, kBytes).ok());
  t->Shutdown();
}

// Reclaim scans the index in parts, with the tier lock released between
// them: a read and a lookup issued mid-scan are served at once, and a
// block of the victim removed mid-scan stays removed, its room given back.
TEST(NvmeCapacity, ReclaimScanLetsReadsAndRemovesThrough) {
  for (bool remove_victim_block : {false, true}) {
    SCOPED_TRACE(remove_victim_block ? "remove mid-scan" : "read mid-scan");
    ScratchDir dir;
    ASSERT_TRUE(dir.ok());
    // 3 regions of 3 blocks (one the spare), capacity 3 blocks of 16 KiB.
    std::unique_ptr<NvmeTier> t = Open(NvmeOptions(dir.path(), 3, kBytes, 3 * kDisk));
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(WriteOne(*t, 0, 4096).ok());  // the victim's only live block
    WriteBlocks(*t, 1, 2, kBytes);
    ASSERT_TRUE(RemoveOne(*t, 1).ok());
    ASSERT_TRUE(RemoveOne(*t, 2).ok());
    WriteBlocks(*t, 3, 2, kBytes);  // the second region: 3, 4, then 5
    ASSERT_TRUE(RemoveOne(*t, 4).ok());
    ASSERT_TRUE(WriteOne(*t, 5).ok());
    bool fired = false;
    std::future<Status> read;
    bool served = false;
    t->TEST_SetDuringReclaimScan([&] {
      fired = true;
      read = std::async(std::launch::async, [&] {
        if (remove_victim_block) return RemoveOne(*t, 0);
        Status st = ReadAndCheck(*t, 3, kBytes);
        return st.ok() && !Present(*t, 4) ? ReadAndCheck(*t, 0, 4096) : st;
      });
      served = read.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    });
    // No region is free and the active one is full: this write reclaims.
    ASSERT_TRUE(WriteOne(*t, 6, 8192).ok());
    t->TEST_SetDuringReclaimScan(nullptr);
    ASSERT_TRUE(fired);
    EXPECT_TRUE(served);
    ASSERT_TRUE(read.valid());
    EXPECT_TRUE(read.get().ok());
    EXPECT_EQ(t->Stats().reclaims, 1u);
    EXPECT_EQ(t->Stats().reinserted_blocks, remove_victim_block ? 0u : 1u);
    ExpectPresent(*t, {0}, !remove_victim_block);
    EXPECT_EQ(t->Usage().used_bytes, 2 * kBytes + 8192 + (remove_victim_block ? 0 : 4096));
    for (uint64_t i : {3, 5}) EXPECT_TRUE(ReadAndCheck(*t, i, kBytes).ok()) << i;
    EXPECT_TRUE(ReadAndCheck(*t, 6, 8192).ok());
    if (!remove_victim_block) EXPECT_TRUE(ReadAndCheck(*t, 0, 4096).ok());
    t->Shutdown();
  }
}

// A store full at restart: new writes drop the oldest unclaimed blocks, not
// the one read since, and the drops are durable.
TEST_F(NvmeUnclaimed, FullStoreAtRestartDropsOldestUnusedBlocksForNewWrites) {
  {
    std::unique_ptr<NvmeTier> t = Open(options_);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(ReadAndCheck(*t, 0, kBytes).ok());  // the oldest, claimed
    for (uint64_t i = 100; i < 105; ++i) ASSERT_TRUE(WriteOne(*t, i).ok()) << i;
    EXPECT_EQ(t->Stats().unclaimed_dropped, 5u);
    ExpectPresent(*t, {1, 2, 3, 4, 5}, false);
    ExpectPresent(*t, {0, 6, 7, 8, 9, 10, 11, 100, 101, 102, 103, 104}, true);
    EXPECT_EQ(t->Usage().blocks, 6u);
    EXPECT_EQ(t->Usage().used_bytes, 6 * kBytes);
    t->Shutdown();
  }
  {
    // Blocks 3..5 shared a region no write reused: only the recorded
    // deletes keep them from coming back.
    std::unique_ptr<NvmeTier> t = Open(options_);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->Stats().recovered_blocks, kBlocks);
    for (uint64_t i = 1; i <= 5; ++i)
      EXPECT_EQ(ReadAndCheck(*t, i, kBytes).code(), StatusCode::kNotFound) << i;
    for (uint64_t i : {0, 100, 101, 102, 103, 104}) EXPECT_TRUE(ReadAndCheck(*t, i, kBytes).ok());
    EXPECT_EQ(t->Usage().blocks, 6u);
    for (uint64_t i = 200; i < 206; ++i) ASSERT_TRUE(WriteOne(*t, i).ok()) << i;
    EXPECT_EQ(t->Stats().unclaimed_dropped, 6u);
    ExpectPresent(*t, {6, 7, 8, 9, 10, 11}, false);
    EXPECT_EQ(t->Usage().blocks, kBlocks);
    // Nothing unclaimed is left: the claimed blocks are the caller's to evict.
    EXPECT_EQ(WriteOne(*t, 206).code(), StatusCode::kResourceExhausted);
    t->Shutdown();
  }
  std::unique_ptr<NvmeTier> t = Open(options_);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Stats().recovered_blocks, kBlocks);
  for (uint64_t i = 1; i < kBlocks; ++i)
    EXPECT_EQ(ReadAndCheck(*t, i, kBytes).code(), StatusCode::kNotFound) << i;
  for (uint64_t i : {0, 100, 101, 102, 103, 104, 200, 201, 202, 203, 204, 205})
    EXPECT_TRUE(ReadAndCheck(*t, i, kBytes).ok()) << i;
  EXPECT_EQ(t->Stats().corruptions, 0u);
  t->Shutdown();
}

// A write drops block 0 while a read of it is between its index lookup and
// its I/O: the read's region pin keeps the bytes in place, so it still
// returns them verified, and claims nothing (block 0 stays dropped).
TEST_F(NvmeUnclaimed, ReadInFlightOfADroppedBlockStillReturnsItsBytes) {
  std::unique_ptr<NvmeTier> t = Open(options_);
  ASSERT_NE(t, nullptr);
  bool fired = false;
  Status during;
  t->TEST_SetAfterReadLookup([&] {
    if (fired) return;
    fired = true;
    during = WriteOne(*t, 100);  // a free region takes it: no reclaim waits on the pin
  });
  EXPECT_TRUE(ReadAndCheck(*t, 0, kBytes).ok());
  t->TEST_SetAfterReadLookup(nullptr);
  ASSERT_TRUE(fired);
  EXPECT_TRUE(during.ok()) << during.ToString();
  EXPECT_EQ(t->Stats().unclaimed_dropped, 1u);
  ExpectPresent(*t, {0}, false);
  ExpectPresent(*t, {1, 100}, true);
  EXPECT_EQ(t->Usage().blocks, 1u);  // block 100 only
  EXPECT_EQ(t->Stats().corruptions, 0u);
  t->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
