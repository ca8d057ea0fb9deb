// The Redis tier out of memory anywhere in a write or a remove, on the
// caller's thread or a connection's: whatever the op answers, the tier's
// count of its own blocks stays exact. A SET dropped with its job used to
// stay counted as being written for good, and a remove cut short left its
// keys counted although the runtime had forgotten them.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "tests/core/alloc_failure.h"
#include "tests/redis/redis_test_util.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{0xa11};
constexpr uint64_t kBlock = 4096;
constexpr uint64_t kBatch = 4;
constexpr long kMaxInjections = 400;
constexpr auto kNoHang = std::chrono::seconds(10);

class RedisAllocFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    server_ = SharedRedis(&why);
    if (server_ == nullptr) GTEST_SKIP() << "no redis-server: " << why;
    TierOptions o = RedisTierOptionsFor({server_->endpoint()}, 1024 * kBlock);
    o.redis.connections = 2;
    tier_ = OpenRedisTier(o, kBlock);
    ASSERT_TRUE(tier_);
  }
  void TearDown() override {
    DisarmAllocationFailures();
    if (tier_) tier_->Shutdown();
  }

  // Writes kBatch new blocks with allocation `n` failing; how many it
  // answered OK, or -1 when it could not be asked (the call threw).
  int WriteFailing(uint64_t first, long n, bool* injected) {
    std::vector<std::vector<std::byte>> data;
    std::vector<WriteOp> ops;
    for (uint64_t i = first; i < first + kBatch; ++i)
      data.push_back(BlockBytes(TestKey(i), kBlock));
    for (uint64_t i = 0; i < kBatch; ++i) ops.push_back(WriteOp{TestKey(first + i), data[i]});
    int ok = -1;
    FailAllocationAfter(n);
    try {
      Completion c = tier_->Write(kNs, ops);
      if (c.WaitFor(kNoHang).code() == StatusCode::kDeadlineExceeded) {
        ADD_FAILURE() << "write with allocation " << n << " failing never ended";
      }
      ok = 0;
      for (size_t i = 0; i < c.size(); ++i) ok += c.result(i).ok() ? 1 : 0;
    } catch (const std::bad_alloc&) {
    }
    *injected = DisarmAllocationFailures();
    return ok;
  }

  RedisServer* server_ = nullptr;
  std::unique_ptr<Tier> tier_;
};

TEST_F(RedisAllocFailureTest, AWriteCutShortCountsExactlyTheBlocksItStored) {
  uint64_t counted = 0;
  long n = 0;
  for (bool injected = true; injected && n < kMaxInjections; ++n) {
    const uint64_t first = 1000 * static_cast<uint64_t>(n + 1);
    const int ok = WriteFailing(first, n, &injected);
    if (ok > 0) counted += static_cast<uint64_t>(ok);
    ASSERT_EQ(tier_->Usage().blocks, counted) << "allocation " << n << " failing";
    ASSERT_EQ(tier_->Usage().used_bytes, counted * kBlock) << "allocation " << n << " failing";
  }
  EXPECT_GT(n, 10) << "the write made too few allocations to test";
  EXPECT_LT(n, kMaxInjections) << "every write still had an allocation failing";
}

TEST_F(RedisAllocFailureTest, ARemoveCutShortStillFreesTheRoomOfItsBlocks) {
  long n = 0;
  for (bool injected = true; injected && n < kMaxInjections; ++n) {
    const uint64_t first = 1000 * static_cast<uint64_t>(n + 1);
    bool write_injected = false;
    ASSERT_EQ(WriteFailing(first, -1, &write_injected), static_cast<int>(kBatch));
    ASSERT_EQ(tier_->Usage().blocks, kBatch);
    std::vector<BlockKey> keys;
    for (uint64_t i = first; i < first + kBatch; ++i) keys.push_back(TestKey(i));
    FailAllocationAfter(n);
    bool asked = true;
    try {
      Completion c = tier_->Remove(kNs, keys);
      if (c.WaitFor(kNoHang).code() == StatusCode::kDeadlineExceeded) {
        ADD_FAILURE() << "remove with allocation " << n << " failing never ended";
      }
    } catch (const std::bad_alloc&) {
      asked = false;  // refused before the tier saw it: the caller still holds the blocks
    }
    injected = DisarmAllocationFailures();
    if (!asked) {
      EXPECT_TRUE(tier_->Remove(kNs, keys).WaitFor(kNoHang).ok());
    }
    ASSERT_EQ(tier_->Usage().blocks, 0u) << "allocation " << n << " failing";
    ASSERT_EQ(tier_->Usage().used_bytes, 0u) << "allocation " << n << " failing";
  }
  EXPECT_GT(n, 5) << "the remove made too few allocations to test";
  EXPECT_LT(n, kMaxInjections) << "every remove still had an allocation failing";
}

}  // namespace
}  // namespace kvtier::testing
