// The NVMe tier out of memory on its engine's thread: a corrupt block's read
// completes while that thread cannot allocate, so the failure's message
// cannot be built. The read still ends (Corruption, a fixed message), the
// region's read pin is released (reclaim of it would otherwise wait for
// good), and the block is never handed over as data.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <memory>
#include <vector>

#include "tests/core/alloc_failure.h"
#include "tests/support/block_data.h"
#include "tests/support/nvme_fault_engine.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{0x99};
constexpr uint64_t kBytes = 16 * 1024;
constexpr auto kNoHang = std::chrono::seconds(5);

TEST(NvmeAllocFailureTest, ACorruptReadCompletingWithoutMemoryEndsAndReleasesItsRegion) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  IoFaults faults;
  // 16 blocks in regions of 4: writing 48 more reclaims every region.
  auto opened =
      OpenNvmeWithFaults(NvmeOptions(dir.path(), 16, kBytes, 4 * kBytes), kBytes, &faults);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<internal::NvmeTier> tier = std::move(opened).value();
  auto write = [&](uint64_t i) {
    std::vector<std::byte> data = BlockBytes(TestKey(i), kBytes);
    WriteOp op{TestKey(i), data};
    Completion c = tier->Write(kNs, std::span(&op, 1));
    EXPECT_TRUE(c.WaitFor(kNoHang).ok()) << "block " << i << ": " << c.status().ToString();
  };
  auto read = [&](uint64_t i, std::vector<std::byte>& out) {
    out.assign(kBytes, std::byte{0});
    ReadOp op{TestKey(i), out};
    Completion c = tier->Read(kNs, std::span(&op, 1));
    EXPECT_TRUE(c.WaitFor(kNoHang).ok() || c.Poll()) << "the read of block " << i << " never ended";
    return c;
  };
  for (uint64_t i = 0; i < 4; ++i) write(i);

  faults.torn_reads = true;  // the block comes back half zeroes: its checks fail
  faults.around_read_done = [](bool in) { FailAllocationsOnThisThread(in); };
  std::vector<std::byte> out;
  Completion torn = read(1, out);
  faults.around_read_done = nullptr;
  faults.torn_reads = false;
  ASSERT_TRUE(torn.Poll());
  EXPECT_EQ(torn.result(0).code(), StatusCode::kCorruption) << torn.result(0).ToString();
  EXPECT_EQ(torn.bytes(0), 0u);
  EXPECT_TRUE(DisarmAllocationFailures()) << "no allocation failed: the path was not tried";

  // The block was not dropped (no memory to record it) and reads whole now.
  Completion again = read(1, out);
  ASSERT_TRUE(again.Poll());
  if (again.result(0).ok()) EXPECT_EQ(out, BlockBytes(TestKey(1), kBytes));
  // Every region is written again, the one the read pinned included.
  auto remove = [&](uint64_t first, uint64_t n) {
    std::vector<BlockKey> keys;
    for (uint64_t i = first; i < first + n; ++i) keys.push_back(TestKey(i));
    EXPECT_TRUE(tier->Remove(kNs, keys).WaitFor(kNoHang).ok());
  };
  remove(0, 4);
  for (uint64_t round = 1; round <= 3; ++round) {
    for (uint64_t i = 0; i < 16; ++i) write(100 * round + i);
    remove(100 * round, 16);
  }
  EXPECT_EQ(tier->Usage().blocks, 0u);
  tier->Shutdown();
}

// Writes block `i` on a thread of its own and returns its result. A write
// that has not returned within kNoHang is stuck for good (a reclaim waiting
// for a writer that never ends), and its thread could never be joined: the
// test process ends there, saying so.
Status WriteOrEnd(internal::NvmeTier& tier, uint64_t i) {
  auto result = std::async(std::launch::async, [&tier, i] {
    std::vector<std::byte> data = BlockBytes(TestKey(i), kBytes);
    WriteOp op{TestKey(i), data};
    Completion c = tier.Write(kNs, std::span(&op, 1));
    return c.WaitFor(kNoHang).ok() ? c.result(0) : c.status();
  });
  if (result.wait_for(2 * kNoHang) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: the write of block %llu never returned\n",
                 static_cast<unsigned long long>(i));
    std::_Exit(1);
  }
  return result.get();
}

// Removes `blocks` blocks from `first` on, then writes as many new ones,
// twice over: every region is reclaimed on the way.
void RefillTwice(internal::NvmeTier& tier, uint64_t first, uint64_t blocks) {
  std::vector<BlockKey> keys;
  for (uint64_t i = first; i < first + blocks; ++i) keys.push_back(TestKey(i));
  EXPECT_TRUE(tier.Remove(kNs, keys).WaitFor(kNoHang).ok());
  for (uint64_t round = 1; round <= 2; ++round) {
    for (uint64_t i = 0; i < blocks; ++i) {
      const Status st = WriteOrEnd(tier, first + 1000 * round + i);
      EXPECT_TRUE(st.ok()) << "round " << round << ", block " << i << ": " << st.ToString();
    }
    keys.clear();
    for (uint64_t i = 0; i < blocks; ++i) keys.push_back(TestKey(first + 1000 * round + i));
    EXPECT_TRUE(tier.Remove(kNs, keys).WaitFor(kNoHang).ok());
  }
}

// A write whose allocation n fails, for every n it makes on its own thread
// (RocksDB, which cannot take a failed allocation, runs on others here: the
// write goes to the region the first block opened): whatever it answers, no
// region is left counting a writer that is gone (a reclaim of it would then
// wait for good), so the tier fills twice over afterwards.
TEST(NvmeAllocFailureTest, AWriteCutShortAnywhereLeavesEveryRegionReclaimable) {
  long n = 0;
  for (bool injected = true; injected && n < 200; ++n) {
    ScratchDir dir;
    ASSERT_TRUE(dir.ok());
    IoFaults faults;
    // 3 blocks: one region of data, the active one, and a spare. A region
    // left counting a writer is then the only one a reclaim can take.
    auto opened =
        OpenNvmeWithFaults(NvmeOptions(dir.path(), 3, kBytes, 4 * kBytes), kBytes, &faults);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    std::unique_ptr<internal::NvmeTier> tier = std::move(opened).value();
    ASSERT_TRUE(WriteOrEnd(*tier, 1).ok());
    std::vector<std::byte> data = BlockBytes(TestKey(2), kBytes);
    WriteOp op{TestKey(2), data};
    FailAllocationAfterOnThisThread(n);
    try {
      Completion c = tier->Write(kNs, std::span(&op, 1));
      EXPECT_TRUE(c.WaitFor(kNoHang).ok() || c.Poll()) << "allocation " << n << ": never ended";
    } catch (const std::bad_alloc&) {
    }
    injected = DisarmAllocationFailures();
    RefillTwice(*tier, 1, 2);
    RefillTwice(*tier, 10, 3);
    ASSERT_FALSE(::testing::Test::HasFailure()) << "allocation " << n << " failing";
    EXPECT_EQ(tier->Usage().blocks, 0u);
    tier->Shutdown();
  }
  EXPECT_GT(n, 3);
}

// A reclaim that runs out of memory listing its victim's blocks gives the
// victim back: it used to stay "reclaiming" for good, its space lost, and
// after three such reclaims no write found room.
TEST(NvmeAllocFailureTest, AReclaimWithoutMemoryToListItsVictimGivesItBack) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  IoFaults faults;
  auto opened = OpenNvmeWithFaults(NvmeOptions(dir.path(), 8, kBytes, 4 * kBytes), kBytes, &faults);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<internal::NvmeTier> tier = std::move(opened).value();
  // The first three reclaims run out of memory in their scan of the index
  // (the hook runs inside it, after its first shard).
  std::atomic<int> reclaims{0};
  tier->TEST_SetDuringReclaimScan([&reclaims] {
    if (reclaims.fetch_add(1) < 3) throw std::bad_alloc();
  });
  int refused = 0;
  std::deque<uint64_t> live;  // at most 3 of the 8 blocks' room: reclaim always frees some
  for (uint64_t i = 0; i < 64; ++i) {
    const int before = reclaims.load();
    const Status st = WriteOrEnd(*tier, 1000 + i);
    if (before < 3 && reclaims.load() > before) {
      EXPECT_FALSE(st.ok()) << "block " << i << ": a reclaim without memory wrote it";
      ++refused;
    } else {
      EXPECT_TRUE(st.ok()) << "block " << i << ": " << st.ToString();
    }
    if (st.ok()) live.push_back(1000 + i);
    while (live.size() > 3) {
      const BlockKey k = TestKey(live.front());
      ASSERT_TRUE(tier->Remove(kNs, std::span(&k, 1)).WaitFor(kNoHang).ok());
      live.pop_front();
    }
  }
  tier->TEST_SetDuringReclaimScan(nullptr);
  EXPECT_EQ(refused, 3) << "the path was not tried three times";
  EXPECT_GT(reclaims.load(), 6);
  tier->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
