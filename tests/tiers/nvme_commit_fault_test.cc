// The NVMe tier's group commit under a failing data sync: a commit that
// fails keeps its index updates (new blocks and deletes) for the next one,
// so nothing written before a successful Flush is missing after a restart.
// A sync that never answers fails at the I/O deadline like any other.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "tests/support/block_data.h"
#include "tests/support/nvme_fault_engine.h"
#include "tests/support/returns_within.h"
#include "tests/support/time_scale.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::NvmeTier;

constexpr uint64_t kBytes = 16 * 1024;

TEST(NvmeCommitFault, FailedCommitIsRetriedByTheNext) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 32, kBytes);
  o.nvme.commit_every_blocks = 1000;  // commits only when asked
  o.nvme.commit_interval_ms = 600000;
  IoFaults faults;
  {
    auto t = OpenNvmeWithFaults(o, kBytes, &faults);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    NvmeTier& tier = **t;
    WriteBlocks(tier, 0, 4, kBytes);
    ASSERT_TRUE(tier.Flush().ok());

    faults.fsync_errno = EIO;
    BlockKey gone = TestKey(0);
    ASSERT_TRUE(tier.Remove(kNvmeNs, std::span(&gone, 1)).Wait().ok());
    WriteBlocks(tier, 4, 6, kBytes);
    Status failed = tier.Flush();
    EXPECT_EQ(failed.ToString(),
              "io_error: nvme data sync: fault engine fsync at offset 0: Input/output error");
    EXPECT_GE(tier.Stats().commit_failures, 1u);
    faults.fsync_errno = 0;
    Status retried = tier.Flush();
    EXPECT_TRUE(retried.ok()) << retried.ToString();
    tier.Shutdown();
  }
  auto again = internal::OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->Stats().recovered_blocks, 9u);
  EXPECT_EQ(ReadAndCheck(**again, 0, kBytes).code(), StatusCode::kNotFound);
  for (uint64_t i = 1; i < 10; ++i) {
    Status st = ReadAndCheck(**again, i, kBytes);
    EXPECT_TRUE(st.ok()) << "block " << i << ": " << st.ToString();
  }
  (*again)->Shutdown();
}

// The device never answers the commit's data sync. Flush fails at the I/O
// deadline, so the blocks written since the last good commit are never
// reported durable (and a restart does not find them); Shutdown, whose last
// commit stalls as well, still returns.
TEST(NvmeCommitFault, StalledSyncFailsTheCommitAtTheDeadline) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 32, kBytes);
  o.nvme.commit_every_blocks = 1000;  // commits only when asked
  o.nvme.commit_interval_ms = 600000;
  o.nvme.io_timeout_ms = 200;
  IoFaults faults;
  {
    auto t = OpenNvmeWithFaults(o, kBytes, &faults);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    NvmeTier& tier = **t;
    WriteBlocks(tier, 0, 2, kBytes);
    ASSERT_TRUE(tier.Flush().ok());
    const uint64_t commits = tier.Stats().index_commits;

    faults.stall_fsync = true;
    WriteBlocks(tier, 2, 3, kBytes);
    const auto start = std::chrono::steady_clock::now();
    Status stalled = tier.Flush();
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(stalled.ToString(),
              "deadline_exceeded: nvme data sync: fault engine fsync, stalled as a pipe read: "
              "io_uring read at offset 18446744073709551615: no completion within 200 ms");
    EXPECT_GE(took, std::chrono::milliseconds(190));
    EXPECT_LT(took, Scaled(std::chrono::seconds(3)));
    EXPECT_EQ(tier.Stats().index_commits, commits);
    EXPECT_EQ(tier.Stats().commit_failures, 1u);
    EXPECT_GE(faults.injected.load(), 1u);
    ASSERT_TRUE(ReturnsWithin([&tier] { tier.Shutdown(); }, Scaled(std::chrono::seconds(5)),
                              "Shutdown with a stalled data sync"));
    EXPECT_EQ(tier.Stats().commit_failures, 2u) << "Shutdown's last commit stalls too";
  }
  faults.stall_fsync = false;
  auto again = internal::OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->Stats().recovered_blocks, 2u);
  for (uint64_t i = 0; i < 2; ++i) {
    Status st = ReadAndCheck(**again, i, kBytes);
    EXPECT_TRUE(st.ok()) << "block " << i << ": " << st.ToString();
  }
  for (uint64_t i = 2; i < 5; ++i) {
    EXPECT_EQ(ReadAndCheck(**again, i, kBytes).code(), StatusCode::kNotFound) << i;
  }
  (*again)->Shutdown();
}

Status WriteOne(Tier& t, uint64_t i) {
  const std::vector<std::byte> data = BlockBytes(TestKey(i), kBytes);
  WriteOp w{TestKey(i), data};
  return t.Write(kNvmeNs, std::span(&w, 1)).Wait();
}

void RemoveRange(Tier& t, uint64_t first, uint64_t end) {
  for (uint64_t i = first; i < end; ++i) {
    const BlockKey key = TestKey(i);
    ASSERT_TRUE(t.Remove(kNvmeNs, std::span(&key, 1)).Wait().ok()) << i;
  }
}

// Reclaim moves a flushed block out of its region, which becomes the spare,
// but the commit that would point the index at the new copy fails. The index
// still points into the spare: a later reclaim may not write over it (giving
// it a new generation) until a commit succeeds, or a crash loses the block.
TEST(NvmeCommitFault, SpareIsNotReusedWhileItsRelocationsAreUncommitted) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  // Three blocks a region; 12 blocks of capacity: 6 regions, one the spare.
  TierOptions o = NvmeOptions(dir.path(), 12, kBytes, 3 * (kBytes + 4096));
  o.nvme.commit_every_blocks = 1000;  // commits only when asked
  o.nvme.commit_interval_ms = 600000;
  IoFaults faults;
  {
    auto t = OpenNvmeWithFaults(o, kBytes, &faults);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    NvmeTier& tier = **t;
    WriteBlocks(tier, 0, 3, kBytes);  // the oldest region: blocks 0..2
    ASSERT_TRUE(tier.Flush().ok());
    faults.fsync_errno = EIO;
    ASSERT_NO_FATAL_FAILURE(RemoveRange(tier, 1, 3));
    // The other four regions, one slot left; then all but block 10 go.
    WriteBlocks(tier, 10, 11, kBytes);
    ASSERT_NO_FATAL_FAILURE(RemoveRange(tier, 11, 21));
    ASSERT_TRUE(WriteOne(tier, 200).ok());
    // The first reclaim moves block 0 into the spare; its commit fails.
    EXPECT_EQ(WriteOne(tier, 201).code(), StatusCode::kIOError);
    EXPECT_EQ(tier.Stats().reclaims, 1u);
    ASSERT_TRUE(WriteOne(tier, 201).ok());
    ASSERT_TRUE(WriteOne(tier, 202).ok());
    // The second would move block 10 into block 0's old region.
    Status refused = WriteOne(tier, 203);
    EXPECT_EQ(refused.code(), StatusCode::kIOError) << refused.ToString();
    EXPECT_NE(refused.ToString().find("not committed"), std::string::npos) << refused.ToString();
    EXPECT_EQ(tier.Stats().reclaims, 1u);
    tier.Shutdown();  // its last commit fails too
  }
  faults.fsync_errno = 0;
  auto again = internal::OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  Status st = ReadAndCheck(**again, 0, kBytes);
  EXPECT_TRUE(st.ok()) << "flushed block 0: " << st.ToString();
  EXPECT_EQ((*again)->Stats().corruptions, 0u);
  (*again)->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
