// How the io_uring engine cuts registration ranges into fixed buffers and
// which budgets it tries. The ranges are never touched: only their
// addresses and lengths are read.
#include "io/fixed_buffers.h"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace kvtier::internal {
namespace {

constexpr uint64_t kPage = kFixedPageBytes;
constexpr uint64_t kGiB = 1ULL << 30;

void* At(uint64_t addr) { return reinterpret_cast<void*>(static_cast<uintptr_t>(addr)); }

TEST(FixedChunksTest, WholePagesOnlyAndTheShortTailIsLeftOut) {
  const std::vector<iovec> ranges{{At(1ULL << 40), 3 * kPage + 100}, {At(1ULL << 41), kPage - 1}};
  const std::vector<iovec> out = FixedChunks(ranges, UINT64_MAX);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].iov_base, At(1ULL << 40));
  EXPECT_EQ(out[0].iov_len, 3 * kPage);
}

TEST(FixedChunksTest, ARangeOverOneGiBIsCutAtOneGiB) {
  const uint64_t base = 1ULL << 40;
  const std::vector<iovec> ranges{{At(base), 2 * kGiB + kGiB / 2}};
  const std::vector<iovec> out = FixedChunks(ranges, UINT64_MAX);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[0].iov_len, kGiB);
  EXPECT_EQ(out[1].iov_base, At(base + kGiB));
  EXPECT_EQ(out[1].iov_len, kGiB);
  EXPECT_EQ(out[2].iov_base, At(base + 2 * kGiB));
  EXPECT_EQ(out[2].iov_len, kGiB / 2);
}

TEST(FixedChunksTest, TheBudgetRoundsDownToPagesAndStopsTheCut) {
  const std::vector<iovec> ranges{{At(1ULL << 40), 4 * kPage}, {At(1ULL << 41), 4 * kPage}};
  const std::vector<iovec> out = FixedChunks(ranges, 5 * kPage + 7);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_EQ(out[0].iov_len, 4 * kPage);
  EXPECT_EQ(out[1].iov_base, At(1ULL << 41));
  EXPECT_EQ(out[1].iov_len, kPage);
  EXPECT_EQ(IovecBytes(out), 5 * kPage);
  EXPECT_TRUE(FixedChunks(ranges, kPage - 1).empty());
}

TEST(FixedChunksTest, NoMoreBuffersThanTheKernelTakes) {
  std::vector<iovec> ranges;
  for (uint64_t i = 0; i < kMaxFixedBuffers + 5; ++i) {
    ranges.push_back({At((1ULL << 40) + i * 2 * kPage), kPage});
  }
  const std::vector<iovec> out = FixedChunks(ranges, UINT64_MAX);
  EXPECT_EQ(out.size(), kMaxFixedBuffers);
  EXPECT_EQ(out.back().iov_base, ranges[kMaxFixedBuffers - 1].iov_base);
}

TEST(RegistrationBudgetsTest, UnderTheLimitEverythingThenHalvesDownToAPage) {
  EXPECT_EQ(RegistrationBudgets(8 * kPage, UINT64_MAX, false),
            (std::vector<uint64_t>{8 * kPage, 4 * kPage, 2 * kPage, kPage}));
  EXPECT_EQ(RegistrationBudgets(8 * kPage, 8 * kPage, false),
            (std::vector<uint64_t>{8 * kPage, 4 * kPage, 2 * kPage, kPage}));
  EXPECT_EQ(RegistrationBudgets(kPage, UINT64_MAX, false), std::vector<uint64_t>{kPage});
}

TEST(RegistrationBudgetsTest, OverTheLimitOnlyAPrivilegedProcessTriesEverything) {
  EXPECT_EQ(RegistrationBudgets(64 * kPage, 8 * kPage, false),
            (std::vector<uint64_t>{8 * kPage, 4 * kPage, 2 * kPage, kPage}));
  EXPECT_EQ(RegistrationBudgets(64 * kPage, 8 * kPage, true),
            (std::vector<uint64_t>{64 * kPage, 8 * kPage, 4 * kPage, 2 * kPage, kPage}));
}

TEST(RegistrationBudgetsTest, AtMostEightBudgets) {
  const std::vector<uint64_t> out = RegistrationBudgets(1ULL << 50, UINT64_MAX, false);
  ASSERT_EQ(out.size(), 8U);
  EXPECT_EQ(out.front(), 1ULL << 50);
  EXPECT_EQ(out.back(), (1ULL << 50) >> 7);
}

// The child of the test below: 0 when this process's budgets follow
// CAP_IPC_LOCK, else the number of the check that failed.
int BudgetsFollowTheIpcLockCapability() {
  const rlimit lim{8 * kPage, 8 * kPage};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0) return 2;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (syscall(SYS_capget, &header, data) != 0) return 3;
  const uint32_t bit = 1U << (CAP_IPC_LOCK % 32);
  if ((data[CAP_IPC_LOCK / 32].effective & bit) != 0 &&
      RegistrationBudgets(64 * kPage).front() != 64 * kPage) {
    return 4;  // exempt from the limit, yet did not try everything
  }
  data[CAP_IPC_LOCK / 32].effective &= ~bit;
  if (syscall(SYS_capset, &header, data) != 0) return 5;
  // Without the capability even root is charged: start at the limit.
  if (RegistrationBudgets(64 * kPage).front() != 8 * kPage) return 6;
  return 0;
}

// Privilege is CAP_IPC_LOCK, not the user id. Runs in a child, which lowers
// its locked-memory limit and drops the capability.
TEST(RegistrationBudgetsTest, ThisProcessIsPrivilegedWhenItHoldsIpcLock) {
  EXPECT_EXIT(_exit(BudgetsFollowTheIpcLockCapability()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kvtier::internal
