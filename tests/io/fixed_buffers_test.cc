// How the io_uring engine cuts registration ranges into fixed buffers and
// which budgets it tries. The ranges are never touched: only their
// addresses and lengths are read.
#include "io/fixed_buffers.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvtier::internal
