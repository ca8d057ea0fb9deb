// Reads racing writes, removes and reclaim in the NVMe tier. A read takes
// its index entry and its region pin under the tier lock and builds its I/O
// after dropping it; these tests hold a read between lookup and device and
// check that the region it points into is not reused meanwhile, so the read
// still returns the bytes it looked up, never a newer block's bytes and
// never a Corruption.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <vector>

#include "io/io_engine.h"
#include "tests/support/block_data.h"
#include "tests/support/forwarding_io_engine.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::IoEngine;
using internal::IoOp;
using internal::IoRequest;

constexpr NamespaceId kNs = kNvmeNs;
constexpr uint64_t kBytes = 16 * 1024;  // 20 KiB on disk: 12 per 256 KiB region
constexpr uint64_t kBlocks = 48;        // 4 regions of capacity + 2 spare
// Blocks kept live: overwrites in flight count against the capacity until
// they land, so a batch of 12 needs 12 blocks of headroom.
constexpr uint64_t kLive = 36;
constexpr auto kNoHang = std::chrono::seconds(10);

// Forwards to a real engine, except that once armed it keeps the next
// batch holding a read until Release(): the read has been looked up and
// built but has not reached the device.
class GateEngine final : public ForwardingIoEngine {
 public:
  explicit GateEngine(std::unique_ptr<IoEngine> inner) : ForwardingIoEngine(std::move(inner)) {}

  void HoldNextRead() {
    std::lock_guard lock(mu_);
    armed_ = true;
  }
  bool holding() const {
    std::lock_guard lock(mu_);
    return !held_.empty();
  }
  Status Release() {
    std::vector<IoRequest> held;
    {
      std::lock_guard lock(mu_);
      held.swap(held_);
    }
    return held.empty() ? Status::Ok() : inner().Submit(std::move(held));
  }

  Status Submit(std::vector<IoRequest> requests) override {
    {
      std::lock_guard lock(mu_);
      bool has_read = false;
      for (const IoRequest& r : requests) has_read |= r.op == IoOp::kRead;
      if (armed_ && has_read) {
        armed_ = false;
        held_ = std::move(requests);
        return Status::Ok();
      }
    }
    return inner().Submit(std::move(requests));
  }
  void Shutdown() override {
    (void)Release();  // every accepted request completes
    inner().Shutdown();
  }

 private:
  mutable std::mutex mu_;
  bool armed_ = false;           // guarded by mu_
  std::vector<IoRequest> held_;  // guarded by mu_
};

// Holds reads at the tier's after-lookup hook (index looked up and region
// pinned, lock released, I/O not yet built) until Release.
class LookupGate {
 public:
  void Hold() {
    std::unique_lock lock(mu_);
    reached_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  bool WaitReached(std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return reached_; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool reached_ = false;
  bool released_ = false;
};

// Where a read is held while writers race it.
enum class HoldAt { kDevice, kAfterLookup };

class NvmeReadRaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    auto inner = internal::NewUringEngine({});
    ASSERT_TRUE(inner.ok()) << inner.status().ToString();
    auto gate = std::make_unique<GateEngine>(std::move(inner).value());
    gate_ = gate.get();
    auto t = internal::OpenNvmeTier(NvmeOptions(dir_.path(), kBlocks, kBytes), TierContext{kBytes},
                                    std::move(gate));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
    ASSERT_EQ(tier_->Stats().regions, 6u);
  }
  void TearDown() override {
    if (tier_) tier_->Shutdown();
  }

  // Writes version `version` of blocks [first, first + count), one batch.
  Status Write(uint64_t first, uint64_t count, uint64_t version) {
    std::vector<std::vector<std::byte>> data;
    std::vector<WriteOp> ops;
    for (uint64_t i = first; i < first + count; ++i) {
      data.push_back(BlockBytes(TestKey(i), kBytes, version));
    }
    for (uint64_t i = 0; i < count; ++i) ops.push_back({TestKey(first + i), data[i]});
    return tier_->Write(kNs, ops).Wait();
  }

  void HeldReadKeepsItsRegion(HoldAt at, bool remove_first);

  ScratchDir dir_;
  GateEngine* gate_ = nullptr;  // owned by tier_
  std::unique_ptr<internal::NvmeTier> tier_;
};

// Block 0 is looked up, then overwritten (or removed first) together with
// the rest of its region; writing on needs that region back, and its reclaim
// must wait for the held read. Once released, the read sees what it looked
// up: version 0, intact.
void NvmeReadRaceTest::HeldReadKeepsItsRegion(HoldAt at, bool remove_first) {
  ASSERT_TRUE(Write(0, kLive, 0).ok());  // 3 regions, 12 blocks each
  std::vector<std::byte> out(kBytes);
  ReadOp rd{TestKey(0), out};
  LookupGate lookup;
  std::future<Completion> reader;  // HoldAt::kAfterLookup: Read returns once released
  std::optional<Completion> held;  // HoldAt::kDevice
  if (at == HoldAt::kDevice) {
    gate_->HoldNextRead();
    held = tier_->Read(kNs, std::span(&rd, 1));
    ASSERT_TRUE(gate_->holding());
    EXPECT_FALSE(held->Poll());
  } else {
    tier_->TEST_SetAfterReadLookup([&] { lookup.Hold(); });
    reader = std::async(std::launch::async, [&] { return tier_->Read(kNs, std::span(&rd, 1)); });
    ASSERT_TRUE(lookup.WaitReached(kNoHang));
  }
  if (remove_first) {
    ASSERT_TRUE(tier_->Remove(kNs, std::vector<BlockKey>{TestKey(0)}).Wait().ok());
  }
  // Overwrites of 12 blocks fill the 2 free regions (one more is the spare);
  // the third batch needs a region back, and FIFO reclaim picks the oldest,
  // block 0's, whose blocks are all dead by then.
  auto writer = std::async(std::launch::async, [this] {
    Status st;
    for (uint64_t n = 0; n < 2 * kLive && st.ok(); n += 12) {
      st = Write(n % kLive, 12, 1 + n / kLive);
    }
    return st;
  });
  // The writer stays blocked in reclaim for as long as the read is held.
  EXPECT_EQ(writer.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "block 0's region was reclaimed under a pinned read";
  if (held) EXPECT_FALSE(held->Poll());

  if (at == HoldAt::kDevice) {
    ASSERT_TRUE(gate_->Release().ok());
  } else {
    lookup.Release();
    ASSERT_EQ(reader.wait_for(kNoHang), std::future_status::ready);
    held = reader.get();
    tier_->TEST_SetAfterReadLookup(nullptr);  // no read in flight past the hook now
  }
  Completion& read = *held;
  ASSERT_TRUE(read.WaitFor(kNoHang).ok()) << read.result(0).ToString();
  EXPECT_EQ(read.bytes(0), kBytes);
  EXPECT_TRUE(out == BlockBytes(TestKey(0), kBytes, 0)) << "the held read got other bytes";

  ASSERT_EQ(writer.wait_for(kNoHang), std::future_status::ready);
  EXPECT_TRUE(writer.get().ok());
  const internal::NvmeStats st = tier_->Stats();
  EXPECT_EQ(st.reclaims, 4u);  // one per batch after the second
  EXPECT_EQ(st.corruptions, 0u);
  // Reads now find the newest version.
  EXPECT_TRUE(ReadAndCheck(*tier_, 0, kBytes, 2).ok());
  EXPECT_TRUE(ReadAndCheck(*tier_, kLive - 1, kBytes, 2).ok());
}

TEST_F(NvmeReadRaceTest, OverwriteAndReclaimWaitForAHeldRead) {
  HeldReadKeepsItsRegion(HoldAt::kDevice, false);
}

TEST_F(NvmeReadRaceTest, RemoveAndReclaimWaitForAHeldRead) {
  HeldReadKeepsItsRegion(HoldAt::kDevice, true);
}

// The window this guards: the lookup has dropped the tier lock and the
// read's I/O is not built yet. The pin taken under the lock must already
// hold the region.
TEST_F(NvmeReadRaceTest, ReclaimWaitsForAReadBetweenLookupAndIo) {
  HeldReadKeepsItsRegion(HoldAt::kAfterLookup, false);
}

TEST_F(NvmeReadRaceTest, RemoveAndReclaimWaitForAReadBetweenLookupAndIo) {
  HeldReadKeepsItsRegion(HoldAt::kAfterLookup, true);
}

// A miss and a too small buffer are answered without I/O and take no pin: a
// reclaim behind them does not wait.
TEST_F(NvmeReadRaceTest, MissesAndShortBuffersPinNothing) {
  ASSERT_TRUE(Write(0, kLive, 0).ok());
  std::vector<std::byte> small(kBytes - 1);
  std::vector<std::byte> out(kBytes);
  const ReadOp ops[] = {{TestKey(1000), out}, {TestKey(0), small}};
  Completion c = tier_->Read(kNs, ops);
  (void)c.WaitFor(kNoHang);
  ASSERT_TRUE(c.Poll());
  EXPECT_EQ(c.result(0).ToString(), "not_found: not in tier 'ssd'");
  EXPECT_EQ(c.result(1).ToString(),
            "invalid_argument: read buffer of 16383 bytes < block of 16384");
  // A leaked pin would hold reclaim (and so these writes) forever: bounded.
  auto writer = std::async(std::launch::async, [this] {
    Status st;
    for (uint64_t n = 0; n < 2 * kLive && st.ok(); n += 12) st = Write(n % kLive, 12, 1);
    return st;
  });
  ASSERT_EQ(writer.wait_for(kNoHang), std::future_status::ready) << "reclaim waits on a pin";
  ASSERT_TRUE(writer.get().ok());
  EXPECT_EQ(tier_->Stats().reclaims, 4u);
  EXPECT_TRUE(ReadAndCheck(*tier_, 0, kBytes, 1).ok());
}

}  // namespace
}  // namespace kvtier::testing
