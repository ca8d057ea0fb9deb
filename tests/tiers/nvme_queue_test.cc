// The NVMe tier against a small I/O queue (nvme.max_queued): a read batch
// needing more requests than the queue holds goes out in chunks, and a
// chunk that finds the queue full of other I/O waits for room instead of
// failing as Busy.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tests/support/block_data.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::AlignedBuffer;
using internal::NvmeTier;
using internal::OpenNvmeTier;

constexpr NamespaceId kNs = kNvmeNs;
constexpr uint64_t kBytes = 4096;
constexpr uint32_t kMaxQueued = 8;

class NvmeQueueTest : public ::testing::Test {
 protected:
  // Arena slots are registered: each block then moves as two requests (the
  // header page and the fixed-buffer payload), so 5 blocks need 10.
  void Open(uint64_t slots) {
    ASSERT_TRUE(dir_.ok());
    TierOptions o = NvmeOptions(dir_.path(), 64, kBytes);
    o.nvme.max_queued = kMaxQueued;
    auto t = OpenNvmeTier(o, TierContext{kBytes});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
    arena_ = AlignedBuffer(slots * kBytes);
    ASSERT_EQ(tier_->RegisterHostMemory(arena_.span()), slots * kBytes);
  }
  void TearDown() override {
    if (tier_) tier_->Shutdown();
  }
  std::span<std::byte> Slot(uint64_t i) { return arena_.span().subspan(i * kBytes, kBytes); }

  // Writes blocks [first, first + n) from arena slots [slot, slot + n), one batch.
  void WriteFromArena(uint64_t first, uint64_t n, uint64_t slot) {
    std::vector<WriteOp> ops;
    for (uint64_t i = 0; i < n; ++i) {
      FillBlock(TestKey(first + i), 0, Slot(slot + i));
      ops.push_back({TestKey(first + i), Slot(slot + i)});
    }
    Completion c = tier_->Write(kNs, ops);
    ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
  }

  // Reads blocks [first, first + n) into slots [slot, slot + n) in one batch;
  // every block must come back OK and byte for byte.
  void ReadIntoArena(uint64_t first, uint64_t n, uint64_t slot) {
    std::vector<ReadOp> ops;
    for (uint64_t i = 0; i < n; ++i) {
      std::memset(Slot(slot + i).data(), 0xEE, kBytes);
      ops.push_back({TestKey(first + i), Slot(slot + i)});
    }
    Completion c = tier_->Read(kNs, ops);
    (void)c.Wait();
    for (uint64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(c.result(i).ok()) << "block " << first + i << ": " << c.result(i).ToString();
      EXPECT_TRUE(std::ranges::equal(Slot(slot + i), BlockBytes(TestKey(first + i), kBytes)))
          << "block " << first + i << " differs";
    }
  }

  ScratchDir dir_;
  std::unique_ptr<NvmeTier> tier_;
  AlignedBuffer arena_;
};

TEST_F(NvmeQueueTest, ReadBatchLargerThanTheQueueSucceeds) {
  ASSERT_NO_FATAL_FAILURE(Open(5));
  WriteFromArena(0, 5, 0);
  ReadIntoArena(0, 5, 0);  // 10 requests through a queue of 8
  EXPECT_GT(tier_->Stats().fixed_buffer_ios, 5u);
}

TEST_F(NvmeQueueTest, ConcurrentBatchesWaitForRoomInAFullQueue) {
  constexpr uint64_t kPerThread = 24;
  ASSERT_NO_FATAL_FAILURE(Open(2 * kPerThread));
  WriteFromArena(0, 2 * kPerThread, 0);
  // Each batch alone needs six queues' worth; together they keep it full.
  for (int round = 0; round < 3; ++round) {
    std::thread other([&] { ReadIntoArena(kPerThread, kPerThread, kPerThread); });
    ReadIntoArena(0, kPerThread, 0);
    other.join();
  }
  EXPECT_EQ(tier_->Counters().errors, 0u);
}

}  // namespace
}  // namespace kvtier::testing
