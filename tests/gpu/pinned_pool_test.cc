// The descriptor-table pool over an allocator of plain host memory, so that
// it runs without a device: a request takes the smallest idle buffer that
// fits, idle buffers stay under the byte cap, and buffers are freed by
// Acquire on its caller's thread, never where a lease ends.
#include "gpu/cuda/pinned_pool.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace kvtier::cuda {
namespace {

constexpr size_t kKiB = 1024;

// Counts what the pool allocates and frees, and on which thread it frees.
struct Ledger {
  std::mutex mu;
  size_t allocations = 0;
  size_t live_bytes = 0;
  std::vector<std::thread::id> freed_on;
};

class HostBuffer final : public PinnedPool::Buffer {
 public:
  HostBuffer(size_t bytes, Ledger* ledger)
      : bytes_(new std::byte[bytes]), size_(bytes), ledger_(ledger) {}
  ~HostBuffer() override {
    std::lock_guard lock(ledger_->mu);
    ledger_->live_bytes -= size_;
    ledger_->freed_on.push_back(std::this_thread::get_id());
  }
  void* host() const override { return bytes_.get(); }
  void* device() const override { return bytes_.get(); }
  size_t size() const override { return size_; }

 private:
  std::unique_ptr<std::byte[]> bytes_;
  size_t size_;
  Ledger* ledger_;
};

PinnedPool::Allocator HostAllocator(Ledger* ledger) {
  return [ledger](size_t bytes) -> Result<std::unique_ptr<PinnedPool::Buffer>> {
    std::lock_guard lock(ledger->mu);
    ++ledger->allocations;
    ledger->live_bytes += bytes;
    return std::unique_ptr<PinnedPool::Buffer>(new HostBuffer(bytes, ledger));
  };
}

// Sizes are rounded up to powers of two of at least 64 KiB.
TEST(PinnedPoolTest, RoundsSizesUp) {
  Ledger ledger;
  PinnedPool pool(HostAllocator(&ledger));
  auto a = pool.Acquire(1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size(), 64 * kKiB);
  auto b = pool.Acquire(100 * kKiB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 128 * kKiB);
  EXPECT_EQ(a->host(), a->device());
}

// A small table takes the small idle buffer, not the first one that fits,
// which leaves the large one for the next large table: no new allocation.
TEST(PinnedPoolTest, ASmallRequestTakesTheSmallestBufferThatFits) {
  Ledger ledger;
  PinnedPool pool(HostAllocator(&ledger));
  {
    auto small = pool.Acquire(64 * kKiB);
    auto big = pool.Acquire(8192 * kKiB);
    ASSERT_TRUE(big.ok() && small.ok());
  }  // big is returned first, then small
  ASSERT_EQ(ledger.allocations, 2u);
  auto small = pool.Acquire(10 * kKiB);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->size(), 64 * kKiB);
  auto big = pool.Acquire(5000 * kKiB);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->size(), 8192 * kKiB);
  EXPECT_EQ(ledger.allocations, 2u);
}

// Leases that end on another thread (the completion thread) free nothing
// there; what is over the byte cap is freed by the next Acquire, on its
// caller's thread, and the idle bytes stay under the cap.
TEST(PinnedPoolTest, IdleBuffersStayUnderTheByteCapAndAreFreedByAcquire) {
  Ledger ledger;
  PinnedPool pool(HostAllocator(&ledger), /*max_free_bytes=*/1024 * kKiB);
  std::vector<PinnedPool::Lease> leases;
  for (int i = 0; i < 3; ++i) {
    auto l = pool.Acquire(512 * kKiB);
    ASSERT_TRUE(l.ok());
    leases.push_back(std::move(l).value());
  }
  auto huge = pool.Acquire(2048 * kKiB);  // over the cap on its own
  ASSERT_TRUE(huge.ok());
  std::optional<PinnedPool::Lease> held(std::move(huge).value());
  std::thread poller([&] {
    leases.clear();
    held.reset();
  });
  poller.join();
  {
    std::lock_guard lock(ledger.mu);
    EXPECT_TRUE(ledger.freed_on.empty()) << "a buffer was freed where its lease ended";
  }
  auto again = pool.Acquire(512 * kKiB);
  ASSERT_TRUE(again.ok());
  std::lock_guard lock(ledger.mu);
  EXPECT_EQ(ledger.allocations, 4u);  // reused, not allocated
  ASSERT_EQ(ledger.freed_on.size(), 2u);
  for (std::thread::id id : ledger.freed_on) EXPECT_EQ(id, std::this_thread::get_id());
  // One 512 KiB buffer in use, one idle: under the 1 MiB cap.
  EXPECT_EQ(ledger.live_bytes, 1024 * kKiB);
}

// No more than kMaxFree idle buffers, whatever their size.
TEST(PinnedPoolTest, IdleBuffersAreCappedInNumber) {
  Ledger ledger;
  PinnedPool pool(HostAllocator(&ledger), /*max_free_bytes=*/size_t{1} << 40);
  {
    std::vector<PinnedPool::Lease> leases;
    for (size_t i = 0; i < PinnedPool::kMaxFree + 4; ++i) {
      auto l = pool.Acquire(64 * kKiB);
      ASSERT_TRUE(l.ok());
      leases.push_back(std::move(l).value());
    }
  }
  auto one = pool.Acquire(64 * kKiB);
  ASSERT_TRUE(one.ok());
  std::lock_guard lock(ledger.mu);
  EXPECT_EQ(ledger.live_bytes, PinnedPool::kMaxFree * 64 * kKiB);
}

}  // namespace
}  // namespace kvtier::cuda
