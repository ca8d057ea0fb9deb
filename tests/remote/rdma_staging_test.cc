// The pool of registered staging buffers behind the client's RDMA batches,
// on the stand-in device: buffers are registered once and lent again, the
// pool grows to its bound, larger or surplus batches get one-off
// registrations, and leases may end on other threads or after the pool.
#include "tiers/remote/rdma_staging.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/remote/fake_rdma_device.h"

namespace kvtier::internal::memd {
namespace {

using testing::FakeRdmaFabric;

constexpr size_t kBuffer = 4096;

class RdmaStagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = std::move(fabric_.Factory()()).value();
    pool_ = std::make_unique<RdmaStagingPool>(*device_, RdmaStagingOptions{kBuffer, 2});
  }
  RdmaStagingPool::Lease Acquire(size_t bytes) {
    auto l = pool_->Acquire(bytes);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(l).value() : RdmaStagingPool::Lease();
  }
  // The lease's bytes lie in the range registered under its lkey.
  void ExpectRegistered(const RdmaStagingPool::Lease& l) {
    ASSERT_FALSE(l.bytes().empty());
    EXPECT_EQ(fabric_.KeyOf(l.bytes().data()), l.lkey());
    EXPECT_EQ(fabric_.KeyOf(l.bytes().data() + l.bytes().size() - 1), l.lkey());
  }

  FakeRdmaFabric fabric_;
  std::unique_ptr<RdmaDevice> device_;
  std::unique_ptr<RdmaStagingPool> pool_;
};

TEST_F(RdmaStagingTest, OneBufferServesBatchAfterBatch) {
  const uint32_t first = Acquire(100).lkey();
  for (size_t n = 1; n <= 200; ++n) {
    RdmaStagingPool::Lease l = Acquire(n * 20);
    ASSERT_NO_FATAL_FAILURE(ExpectRegistered(l));
    EXPECT_EQ(l.bytes().size(), n * 20);
    EXPECT_TRUE(l.pooled());
    EXPECT_EQ(l.lkey(), first);
  }
  EXPECT_EQ(fabric_.registrations(), 1);
  EXPECT_EQ(pool_->pooled(), 1u);
  EXPECT_EQ(pool_->idle(), 1u);
}

TEST_F(RdmaStagingTest, GrowsToItsBoundThenLendsOneOffs) {
  RdmaStagingPool::Lease a = Acquire(kBuffer), b = Acquire(1);
  EXPECT_TRUE(a.pooled() && b.pooled());
  EXPECT_NE(a.lkey(), b.lkey());
  EXPECT_EQ(pool_->pooled(), 2u);
  EXPECT_EQ(pool_->idle(), 0u);
  // At the bound with both lent: a one-off, deregistered when it ends.
  RdmaStagingPool::Lease c = Acquire(10);
  ASSERT_NO_FATAL_FAILURE(ExpectRegistered(c));
  EXPECT_FALSE(c.pooled());
  EXPECT_EQ(fabric_.registered(), 3u);
  c.Reset();
  EXPECT_EQ(fabric_.registered(), 2u);
  EXPECT_TRUE(c.bytes().empty());
  a.Reset();
  b = {};
  EXPECT_EQ(pool_->idle(), 2u);
  EXPECT_EQ(fabric_.registered(), 2u) << "pooled buffers stay registered";
  // Both are lent again before anything new is registered.
  RdmaStagingPool::Lease d = Acquire(5), e = Acquire(6);
  EXPECT_TRUE(d.pooled() && e.pooled());
  EXPECT_EQ(fabric_.registrations(), 3);
}

TEST_F(RdmaStagingTest, ABatchLargerThanABufferGetsItsOwnRegistration) {
  RdmaStagingPool::Lease big = Acquire(kBuffer + 1);
  ASSERT_NO_FATAL_FAILURE(ExpectRegistered(big));
  EXPECT_FALSE(big.pooled());
  EXPECT_EQ(big.bytes().size(), kBuffer + 1);
  EXPECT_EQ(pool_->pooled(), 0u);
  big.Reset();
  EXPECT_EQ(fabric_.registered(), 0u);
  RdmaStagingPool::Lease none = Acquire(0);
  EXPECT_TRUE(none.bytes().empty());
  EXPECT_EQ(fabric_.registrations(), 1);
}

TEST_F(RdmaStagingTest, LeasesMayOutliveThePool) {
  RdmaStagingPool::Lease kept = Acquire(64);
  Acquire(64);  // a second buffer, idle when the pool goes
  EXPECT_EQ(fabric_.registered(), 2u);
  pool_.reset();
  EXPECT_EQ(fabric_.registered(), 1u) << "the idle buffer outlived its pool";
  ASSERT_NO_FATAL_FAILURE(ExpectRegistered(kept));
  std::fill(kept.bytes().begin(), kept.bytes().end(), std::byte{7});
  kept.Reset();
  EXPECT_EQ(fabric_.registered(), 0u);
}

TEST_F(RdmaStagingTest, LeasesEndOnOtherThreads) {
  // As when a batch's last completion closure is dropped on the poller.
  constexpr int kRounds = 500;
  for (int i = 0; i < kRounds; ++i) {
    RdmaStagingPool::Lease a = Acquire(100), b = Acquire(200);
    std::thread t([l = std::move(a)]() mutable { l.Reset(); });
    std::thread u([l = std::move(b)]() mutable { l = {}; });
    t.join();
    u.join();
  }
  EXPECT_EQ(fabric_.registrations(), 2);
  EXPECT_EQ(pool_->idle(), 2u);
}

TEST(RdmaStagingOptionsTest, EmptyPoolsAreRefused) {
  EXPECT_TRUE(RdmaStagingOptions().Validate().ok());
  const RdmaStagingOptions no_bytes{0, 4}, no_buffers{4096, 0};
  EXPECT_EQ(no_bytes.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(no_buffers.Validate().ToString(),
            "invalid_argument: RDMA staging needs buffer_bytes and max_buffers above 0");
}

}  // namespace
}  // namespace kvtier::internal::memd
