// Reclaim of the NVMe tier under a failing device. A reclaim that cannot
// finish (queue full, deadline, a failed write of the moved blocks) moves
// nothing: the victim keeps its blocks and the write that needed the room
// fails. An I/O error reading the victim costs only the blocks that cannot
// be read. And a reservation whose write failed to build is given back, so
// reclaim never waits for it.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <new>
#include <string>
#include <vector>

#include "tests/support/block_data.h"
#include "tests/support/nvme_fault_engine.h"
#include "tests/support/returns_within.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::DiskBytes;
using internal::NvmeTier;

constexpr uint64_t kBytes = 16 * 1024;
// Three blocks (20 KiB on disk each) to a region.
constexpr uint64_t kRegionBytes = 64 * 1024;
constexpr uint64_t kBlocks = 16;

class NvmeReclaimFaultTest : public ::testing::Test {
 protected:
  void Open(uint64_t capacity_blocks = kBlocks, uint32_t timeout_ms = 2000) {
    ASSERT_TRUE(dir_.ok());
    TierOptions o = NvmeOptions(dir_.path(), capacity_blocks, kBytes, kRegionBytes);
    o.nvme.io_timeout_ms = timeout_ms;
    auto t = OpenNvmeWithFaults(o, kBytes, &faults_, lost_.Sink());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
  }
  void TearDown() override {
    if (tier_) tier_->Shutdown();
  }

  // Rewrites block 0 as `version`; returns the write's result.
  Status Rewrite0(uint64_t version) {
    std::vector<std::byte> data = BlockBytes(TestKey(0), kBytes, version);
    WriteOp w{TestKey(0), data};
    Completion c = tier_->Write(kNvmeNs, std::span(&w, 1));
    if (!c.WaitFor(std::chrono::seconds(10)).ok() && !c.Poll()) return Status::Internal("hung");
    return c.result(0);
  }

  // Blocks 0..15, then block 0 five more times: every region but the spare
  // is used up, so the next write reclaims the oldest region, which holds
  // blocks 1 and 2 (and the first, dead, copy of block 0).
  void FillUpToReclaim() {
    WriteBlocks(*tier_, 0, kBlocks, kBytes);
    for (uint64_t v = 1; v <= 5; ++v) ASSERT_TRUE(Rewrite0(v).ok());
    ASSERT_EQ(tier_->Stats().reclaims, 0u);
  }

  // Every block reads back byte for byte; block 0 as `version0`.
  void ExpectAllBlocks(uint64_t version0) {
    EXPECT_TRUE(ReadAndCheck(*tier_, 0, kBytes, version0).ok());
    for (uint64_t i = 1; i < kBlocks; ++i) {
      Status st = ReadAndCheck(*tier_, i, kBytes);
      EXPECT_TRUE(st.ok()) << "block " << i << ": " << st.ToString();
    }
  }

  // Enough rewrites to reclaim every region a few times.
  void Churn(uint64_t from_version) {
    for (uint64_t v = from_version; v < from_version + 30; ++v) {
      Status st = Rewrite0(v);
      ASSERT_TRUE(st.ok()) << "version " << v << ": " << st.ToString();
    }
    EXPECT_GT(tier_->Stats().reclaims, 5u);
    ExpectAllBlocks(from_version + 29);
  }

  ScratchDir dir_;
  IoFaults faults_;
  LostCopies lost_;
  std::unique_ptr<NvmeTier> tier_;
};

TEST_F(NvmeReclaimFaultTest, EioOnTheRegionReadMovesTheBlocksOneByOne) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(FillUpToReclaim());
  faults_.min_bytes = DiskBytes(kBytes) + 1;  // the victim's span, not one block
  faults_.read_errno = EIO;
  Status st = Rewrite0(6);
  faults_.read_errno = 0;
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(faults_.injected.load(), 1u);
  EXPECT_EQ(tier_->Stats().reclaims, 1u);
  EXPECT_EQ(tier_->Stats().unreadable_blocks, 0u);
  ExpectAllBlocks(6);
  ASSERT_NO_FATAL_FAILURE(Churn(7));
}

TEST_F(NvmeReclaimFaultTest, EioOnEveryReadDropsOnlyTheUnreadableBlocks) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(FillUpToReclaim());
  faults_.read_errno = EIO;
  Status st = Rewrite0(6);
  faults_.read_errno = 0;
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(tier_->Stats().unreadable_blocks, 2u);
  // The runtime is told, or its lookups would go on finding them here.
  EXPECT_EQ(lost_.Taken(), (std::vector<std::pair<NamespaceId, BlockKey>>{{kNvmeNs, TestKey(1)},
                                                                          {kNvmeNs, TestKey(2)}}));
  EXPECT_EQ(ReadAndCheck(*tier_, 1, kBytes).code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadAndCheck(*tier_, 2, kBytes).code(), StatusCode::kNotFound);
  EXPECT_TRUE(ReadAndCheck(*tier_, 0, kBytes, 6).ok());
  for (uint64_t i = 3; i < kBlocks; ++i) EXPECT_TRUE(ReadAndCheck(*tier_, i, kBytes).ok()) << i;
  EXPECT_EQ(tier_->Usage().blocks, kBlocks - 2);
  EXPECT_EQ(tier_->Usage().used_bytes, (kBlocks - 2) * kBytes);
}

TEST_F(NvmeReclaimFaultTest, BusyReadingTheVictimFailsTheWriteAndKeepsTheBlocks) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(FillUpToReclaim());
  faults_.min_bytes = DiskBytes(kBytes) + 1;
  faults_.read_errno = EAGAIN;  // the device answers Busy
  Status st = Rewrite0(6);
  faults_.read_errno = 0;
  EXPECT_EQ(st.code(), StatusCode::kBusy) << st.ToString();
  EXPECT_NE(st.message().find("tier 'ssd': reclaim: region 1 kept its blocks: fault engine read"),
            std::string::npos)
      << st.ToString();
  EXPECT_EQ(tier_->Stats().reclaims, 0u);
  ExpectAllBlocks(5);
  EXPECT_TRUE(Rewrite0(6).ok());
  EXPECT_EQ(tier_->Stats().reclaims, 1u);
  ExpectAllBlocks(6);
  ASSERT_NO_FATAL_FAILURE(Churn(7));
}

// Region 1, the oldest, times out on every read of its span: each reclaim
// picked it again (FIFO), so every write that needed room failed for good.
// A region whose reclaim failed now goes behind the others: the next write
// reclaims another region, and region 1 keeps its blocks.
TEST_F(NvmeReclaimFaultTest, AVictimThatCannotBeReadIsNotPickedAgainFirst) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(FillUpToReclaim());
  faults_.min_bytes = DiskBytes(kBytes) + 1;  // the victim's span, not one block
  faults_.from_offset = kRegionBytes;         // region 1 only
  faults_.to_offset = 2 * kRegionBytes;
  faults_.read_errno = ETIMEDOUT;  // not an I/O error: no block-by-block read
  EXPECT_EQ(Rewrite0(6).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(tier_->Stats().reclaims, 0u);
  Status st = Rewrite0(7);
  EXPECT_TRUE(st.ok()) << st.ToString();
  // The other regions are nearly all live: reclaiming them (FIFO, the
  // oldest after region 1 first) frees a little room each.
  EXPECT_GT(tier_->Stats().reclaims, 0u);
  faults_.read_errno = 0;
  ExpectAllBlocks(7);
}

// The moved blocks' write fails after the spare's new generation is durable:
// the spare stays empty and usable, the victim keeps its blocks.
TEST_F(NvmeReclaimFaultTest, StalledWriteOfTheMovedBlocksKeepsVictimAndSpare) {
  ASSERT_NO_FATAL_FAILURE(Open(kBlocks, /*timeout_ms=*/200));
  ASSERT_NO_FATAL_FAILURE(FillUpToReclaim());
  faults_.min_bytes = DiskBytes(kBytes) + 1;  // two packed blocks, not one block's write
  faults_.stall_writes = true;
  Status st = Rewrite0(6);
  faults_.stall_writes = false;
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_EQ(tier_->Stats().reclaims, 0u);
  ExpectAllBlocks(5);
  EXPECT_TRUE(Rewrite0(6).ok());
  ExpectAllBlocks(6);
  ASSERT_NO_FATAL_FAILURE(Churn(7));
}

// A device that moves one block within nvme.io_timeout_ms but not a region
// (a slow or busy disk, or large regions): reclaim reads and writes the
// victim's blocks a piece at a time, each request in its own time, and the
// write that needed the room succeeds. With the region in one request it
// timed out, and so did every later write that needed room.
TEST_F(NvmeReclaimFaultTest, AVictimMovesInPiecesOnADeviceTooSlowForAWholeRegion) {
  ASSERT_NO_FATAL_FAILURE(Open(kBlocks, /*timeout_ms=*/200));
  tier_->TEST_SetReclaimIoChunk(DiskBytes(kBytes));
  ASSERT_NO_FATAL_FAILURE(FillUpToReclaim());
  faults_.min_bytes = DiskBytes(kBytes) + 1;  // a request larger than a block never ends
  faults_.stall_reads = true;
  faults_.stall_writes = true;
  Status st = Rewrite0(6);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(tier_->Stats().reclaims, 1u);
  EXPECT_EQ(faults_.injected.load(), 0u) << "a request larger than a block was made";
  ExpectAllBlocks(6);
  ASSERT_NO_FATAL_FAILURE(Churn(7));
  EXPECT_EQ(faults_.injected.load(), 0u);
  faults_.stall_reads = false;
  faults_.stall_writes = false;
}

// Three regions: the spare and two to write. The throw leaves a reservation
// in the first; once the second is full, reclaim must take the first.
TEST_F(NvmeReclaimFaultTest, ReservationIsGivenBackWhenBuildingTheWriteThrows) {
  ASSERT_NO_FATAL_FAILURE(Open(/*capacity_blocks=*/3));
  WriteBlocks(*tier_, 0, 2, kBytes);
  const TierUsage before = tier_->Usage();
  int calls = 0;
  tier_->TEST_SetAfterWriteReserve([&] {
    if (calls++ == 0) throw std::bad_alloc();
  });
  std::vector<std::byte> data = BlockBytes(TestKey(2), kBytes);
  WriteOp w{TestKey(2), data};
  bool threw = false;
  try {
    Completion c = tier_->Write(kNvmeNs, std::span(&w, 1));
    (void)c.Wait();
    EXPECT_EQ(c.result(0).ToString(),
              "resource_exhausted: nvme write: out of memory building the I/O");
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  tier_->TEST_SetAfterWriteReserve(nullptr);
  EXPECT_FALSE(threw) << "the exception left the tier";
  EXPECT_EQ(tier_->Usage().used_bytes, before.used_bytes);
  EXPECT_EQ(tier_->Usage().blocks, before.blocks);
  NvmeTier* t = tier_.get();
  const bool returned = ReturnsWithin(
      [t] {
        for (uint64_t v = 1; v <= 12; ++v) {
          std::vector<std::byte> d = BlockBytes(TestKey(v % 2), kBytes, v);
          WriteOp op{TestKey(v % 2), d};
          EXPECT_TRUE(t->Write(kNvmeNs, std::span(&op, 1)).Wait().ok()) << v;
        }
      },
      std::chrono::seconds(10), "a write (reclaim waited for the abandoned reservation)");
  ASSERT_TRUE(returned);
  EXPECT_GE(tier_->Stats().reclaims, 1u);
  EXPECT_TRUE(ReadAndCheck(*tier_, 0, kBytes, 12).ok());
  EXPECT_TRUE(ReadAndCheck(*tier_, 1, kBytes, 11).ok());
  Completion again = tier_->Write(kNvmeNs, std::span(&w, 1));
  EXPECT_TRUE(again.Wait().ok()) << again.status().ToString() << ": the room was given back";
}

}  // namespace
}  // namespace kvtier::testing
