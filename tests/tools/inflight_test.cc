// The request pumps of kvtier-bench nvme and remote return only once none of
// their requests is still running, so the caller's buffers may go as soon as
// they return, on a failure too.
#include "tools/bench/inflight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace kvtier::bench {
namespace {

constexpr NamespaceId kNs{7};
constexpr size_t kBlockBytes = 4096;

// Fails the first read at once; finishes the second from a thread 50 ms
// later, writing into its buffer as a real backend does.
class LateTier : public Tier {
 public:
  LateTier() : Tier("late", "test", TierCapabilities{}) {}
  ~LateTier() override { Shutdown(); }
  TierUsage Usage() const override { return {}; }

  // Set by the late thread after its write, before it finishes the read.
  std::atomic<bool> late_write_done{false};

 protected:
  void DoRead(NamespaceId, std::span<const ReadOp> ops, CompletionSource done) override {
    if (reads_++ == 0) {
      done.SetAll(Status::IOError("injected failure of the first read"));
      done.Finish();
      return;
    }
    const std::span<std::byte> dst = ops[0].dst;
    late_ = std::thread([this, dst, done = std::move(done)]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::memset(dst.data(), 0x5A, dst.size());
      late_write_done.store(true, std::memory_order_release);
      done.Set(0, Status::Ok(), dst.size());
      done.Finish();
    });
  }
  void DoWrite(NamespaceId, std::span<const WriteOp>, CompletionSource done) override {
    done.SetAll(Status::NotSupported("reads only"));
    done.Finish();
  }
  void DoRemove(NamespaceId, std::span<const BlockKey>, CompletionSource done) override {
    done.SetAll(Status::NotSupported("reads only"));
    done.Finish();
  }
  void DoContains(NamespaceId, std::span<const BlockKey>, CompletionSource done) override {
    done.SetAll(Status::NotSupported("reads only"));
    done.Finish();
  }
  void DoShutdown() override {
    if (late_.joinable()) late_.join();
  }

 private:
  int reads_ = 0;  // DoRead runs on the caller's thread here
  std::thread late_;
};

// Under AddressSanitizer a pump that returned early would show as a
// heap-use-after-free of `dst` 50 ms later; without it, the late write is
// seen to have landed before the pump returned.
TEST(InflightTest, PumpBlocksWaitsForRequestsInFlightWhenOneFails) {
  LateTier tier;
  {
    std::vector<std::byte> dst(2 * kBlockBytes, std::byte{0});
    std::vector<ReadOp> ops(2);
    Result<double> r =
        PumpBlocks(/*blocks=*/2, /*queue_depth=*/2, kBlockBytes, [&](uint64_t i, uint32_t slot) {
          ops[slot] = {BlockKey{1, i}, std::span(dst).subspan(slot * kBlockBytes, kBlockBytes)};
          return tier.Read(kNs, std::span(&ops[slot], 1));
        });
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kIOError) << r.status().ToString();
    EXPECT_TRUE(tier.late_write_done.load(std::memory_order_acquire))
        << "PumpBlocks returned with a request still in flight";
    EXPECT_EQ(dst[kBlockBytes], std::byte{0x5A});
  }  // dst is freed here
  tier.Shutdown();
}

TEST(InflightTest, StreamWindowsWaitsForEveryWindowWhenOneFails) {
  LateTier tier;
  {
    std::vector<std::byte> dst(2 * kBlockBytes, std::byte{0});
    std::vector<Window> windows(2);
    for (size_t w = 0; w < windows.size(); ++w) {
      windows[w].reads.push_back(
          {BlockKey{2, w}, std::span(dst).subspan(w * kBlockBytes, kBlockBytes)});
    }
    Result<double> r = StreamWindows(
        windows, /*batches=*/4, kBlockBytes, [&](Window& w) { return tier.Read(kNs, w.reads); },
        "remote read");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kIOError) << r.status().ToString();
    EXPECT_NE(r.status().message().find("remote read"), std::string_view::npos)
        << r.status().ToString();
    EXPECT_TRUE(tier.late_write_done.load(std::memory_order_acquire))
        << "StreamWindows returned with a batch still in flight";
    EXPECT_EQ(dst[kBlockBytes], std::byte{0x5A});
  }  // dst and the windows are freed here
  tier.Shutdown();
}

TEST(InflightTest, PumpsReportThroughputWhenAllSucceed) {
  std::atomic<int> issued{0};
  Result<double> r = PumpBlocks(10, 3, kBlockBytes, [&](uint64_t, uint32_t slot) {
    EXPECT_LT(slot, 3u);
    ++issued;
    return CompletionSource::Done(1, Status::Ok());
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(*r, 0);
  EXPECT_EQ(issued.load(), 10);

  std::vector<Window> windows(2);
  int batches = 0;
  Result<double> s = StreamWindows(
      windows, 5, kBlockBytes,
      [&](Window&) {
        ++batches;
        return CompletionSource::Done(1, Status::Ok());
      },
      "write");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GT(*s, 0);
  EXPECT_EQ(batches, 5);
}

}  // namespace
}  // namespace kvtier::bench
