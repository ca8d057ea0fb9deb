// The remote tier's RDMA leases as the client keeps them: a LEASE_REPLY lets
// the client read its slots until the lease ends (rdma_link.h), after which
// the server may give them to other blocks. A READ not posted by then is not
// posted, and one completing after it fails even if its bytes arrived; both
// are Unavailable, a miss the tier never counts as a corruption. The tier's
// clock (TierContext) is a ManualClock, so a lease ends when the test moves
// it, and the stand-in device refuses posts or holds completions to put each
// READ on either side of that end. No test waits for a lease in real time.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "kvtier/env.h"
#include "tests/remote/fake_rdma_device.h"
#include "tests/remote/memd_test_options.h"
#include "tests/support/block_data.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/remote_tier.h"

namespace kvtier::testing {
namespace {

using memd::MemdServer;

constexpr uint64_t kBlockBytes = 16 << 10;
constexpr NamespaceId kNs{9};
constexpr char kSecret[] = "rdma-lease-secret";
constexpr uint32_t kLeaseMs = 2000;
constexpr uint64_t kNanosPerMs = 1'000'000;
constexpr auto kWait = std::chrono::seconds(10);

// Polls `done` every millisecond for up to kWait.
bool Eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Waits up to kWait for `c`; true when every item has its result.
bool Finished(const Completion& c) {
  (void)c.WaitFor(kWait);  // its status is the first failure, checked per item
  return c.Poll();
}

class RdmaLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    memd::MemdServerOptions so = SmallMemdOptions(kSecret, "rdma");
    so.rdma_device = fabric_.Factory();
    so.lease_ms = kLeaseMs;
    auto s = MemdServer::Start(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    TierOptions o;
    o.name = "lease-remote";
    o.type = "remote";
    o.capacity_bytes = 8 * kBlockBytes;
    o.servers = {"127.0.0.1:" + std::to_string(server_->port())};
    o.remote.transport = "rdma";
    o.remote.secret = kSecret;
    o.remote.connections = 1;
    o.remote.op_timeout_ms = 5000;
    const TierContext context{kBlockBytes, clock_, StderrLogSink(LogLevel::kError)};
    auto t = internal::NewRemoteTierOn(o, context, fabric_.Factory());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
    for (uint64_t i = 0; i < 2; ++i) {
      data_.push_back(BlockBytes(TestKey(i), kBlockBytes));
      out_.emplace_back(kBlockBytes);
    }
    const WriteOp w[] = {{TestKey(0), data_[0]}, {TestKey(1), data_[1]}};
    Completion put = tier_->Write(kNs, w);
    ASSERT_TRUE(put.WaitFor(kWait).ok()) << put.status().ToString();
  }
  void TearDown() override {
    fabric_.BusyNext(0);
    fabric_.Hold(false);
    if (tier_) tier_->Shutdown();
    if (server_) server_->Stop();
  }
  // Starts reading the first `n` stored blocks into out_.
  Completion StartRead(size_t n) {
    reads_.clear();
    for (size_t i = 0; i < n; ++i) reads_.push_back({TestKey(i), out_[i]});
    return tier_->Read(kNs, reads_);
  }
  void Advance(uint64_t ms) { clock_->Advance(ms * kNanosPerMs); }

  FakeRdmaFabric fabric_;  // first: outlives the server and the tier
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::unique_ptr<MemdServer> server_;
  std::unique_ptr<Tier> tier_;
  std::vector<std::vector<std::byte>> data_;
  std::vector<std::vector<std::byte>> out_;
  std::vector<ReadOp> reads_;
};

// A READ that a full send queue holds back until its lease has ended is
// never posted: the server may have given its slot to another block.
TEST_F(RdmaLeaseTest, AReadHeldBackPastItsLeaseIsNeverPosted) {
  fabric_.BusyNext(1 << 30);
  Completion r = StartRead(1);
  // The LEASE_REPLY came and its READ was refused: it waits in the backlog.
  ASSERT_TRUE(Eventually([&] { return fabric_.busy_refused() > 0; }));
  Advance(kLeaseMs);
  fabric_.BusyNext(0);  // room again: the link's next tick drains its backlog
  ASSERT_TRUE(Finished(r));
  EXPECT_EQ(r.result(0).code(), StatusCode::kUnavailable) << r.result(0).ToString();
  EXPECT_EQ(fabric_.reads(), 0);
  const TierCounters c = tier_->Counters();
  EXPECT_EQ(c.read_hits, 0u);
  EXPECT_EQ(c.corruptions, 0u);
}

// A READ completing after its lease ended fails even if its bytes verify:
// the slot may have been rewritten while it ran. The stand-in tears the
// first READ as such a rewrite would (a checksum failure, so a corruption,
// if it were verified); the second arrives intact. Both are misses.
TEST_F(RdmaLeaseTest, AReadCompletingAfterItsLeaseIsAMissNotACorruption) {
  fabric_.Hold(true);
  fabric_.TearNext(1);
  Completion r = StartRead(2);
  // Both READs are posted and their bytes have landed; no completion yet.
  ASSERT_TRUE(Eventually([&] { return fabric_.reads() == 2; }));
  Advance(kLeaseMs);
  fabric_.Hold(false);
  ASSERT_TRUE(Finished(r));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.result(i).code(), StatusCode::kUnavailable) << i << ": " << r.result(i).ToString();
    EXPECT_EQ(r.bytes(i), 0u) << i;
    // Staged, so never copied out.
    EXPECT_TRUE(std::all_of(out_[i].begin(), out_[i].end(), [](std::byte x) {
      return x == std::byte{0};
    })) << i;
  }
  const TierCounters c = tier_->Counters();
  EXPECT_EQ(c.read_hits, 0u);
  EXPECT_EQ(c.corruptions, 0u);
}

// Within its lease a READ held back, then posted and held in flight, still
// succeeds, byte for byte.
TEST_F(RdmaLeaseTest, AReadWithinItsLeaseSucceeds) {
  fabric_.BusyNext(1 << 30);
  Completion r = StartRead(1);
  ASSERT_TRUE(Eventually([&] { return fabric_.busy_refused() > 0; }));
  Advance(kLeaseMs / 4);
  fabric_.Hold(true);
  fabric_.BusyNext(0);
  ASSERT_TRUE(Eventually([&] { return fabric_.reads() == 1; }));
  Advance(kLeaseMs / 4);
  fabric_.Hold(false);
  ASSERT_TRUE(r.WaitFor(kWait).ok()) << r.status().ToString();
  EXPECT_EQ(r.bytes(0), kBlockBytes);
  EXPECT_EQ(out_[0], data_[0]);
  const TierCounters c = tier_->Counters();
  EXPECT_EQ(c.read_hits, 1u);
  EXPECT_EQ(c.errors, 0u);
}

}  // namespace
}  // namespace kvtier::testing
