// The NVMe tier out of memory on its engine's thread: a corrupt block's read
// completes while that thread cannot allocate, so the failure's message
// cannot be built. The read still ends (Corruption, a fixed message), the
// region's read pin is released (reclaim of it would otherwise wait for
// good), and the block is never handed over as data.
#include <gtest/gtest.h>

#include <chrono>
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

}  // namespace
}  // namespace kvtier::testing
