// The NVMe tier's group commit under a failing data sync: a commit that
// fails keeps its index updates (new blocks and deletes) for the next one,
// so nothing written before a successful Flush is missing after a restart.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "tests/support/block_data.h"
#include "tests/support/nvme_fault_engine.h"
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

}  // namespace
}  // namespace kvtier::testing
