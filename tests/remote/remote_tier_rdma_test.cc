// The remote tier with `transport: rdma`, built as NewRemoteTier builds it
// but on an injected device (NewRemoteTierOn): the stand-in in every build,
// the machine's own in the `rdma`-labelled binary (skips without one). The
// kvtier-memd server runs in-process on 127.0.0.1 with the same device.
// Checked: the tier asks for its device once and before anything else, its
// failure is the tier's error, and blocks move one-sided over the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
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
constexpr NamespaceId kNs{5};
constexpr char kSecret[] = "tier-rdma-secret";
constexpr char kTierName[] = "rdma-remote";
constexpr auto kWait = std::chrono::seconds(10);

memd::MemdServerOptions ServerOptions(const std::string& transport) {
  return SmallMemdOptions(kSecret, transport);
}

TierOptions TierOptionsFor(uint16_t port, const std::string& transport) {
  TierOptions o;
  o.name = kTierName;
  o.type = "remote";
  o.capacity_bytes = 8 * kBlockBytes;
  o.servers = {"127.0.0.1:" + std::to_string(port)};
  o.remote.transport = transport;
  o.remote.secret = kSecret;
  o.remote.connections = 1;
  o.remote.connect_timeout_ms = 1000;
  o.remote.op_timeout_ms = 2000;
  o.remote.reconnect_backoff_ms = 1;
  o.remote.reconnect_backoff_max_ms = 1;
  return o;
}

TierContext Context() {
  return TierContext{kBlockBytes, SystemClock(), StderrLogSink(LogLevel::kError), {}};
}

class RemoteTierRdmaTest : public ::testing::TestWithParam<RdmaDev> {
 protected:
  void SetUp() override {
    auto f = DeviceFor(GetParam(), fabric_);
    if (!f.ok()) GTEST_SKIP() << "no RDMA device: " << f.status().message();
    factory_ = *f;
    memd::MemdServerOptions o = ServerOptions("rdma");
    o.rdma_device = factory_;
    auto s = MemdServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    auto t = internal::NewRemoteTierOn(TierOptionsFor(server_->port(), "rdma"), Context(),
                                       Counted(factory_, tier_asks_));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
  }
  void TearDown() override {
    if (tier_) tier_->Shutdown();
    if (server_) server_->Stop();
  }
  bool fake() const { return GetParam() == RdmaDev::kFake; }

  FakeRdmaFabric fabric_;  // first: outlives the server and the tier
  memd::RdmaDeviceFactory factory_;
  std::atomic<int> tier_asks_{0};
  std::unique_ptr<MemdServer> server_;
  std::unique_ptr<Tier> tier_;
};

TEST_P(RemoteTierRdmaTest, BlocksRoundTripOverTheDeviceOpenedOnce) {
  EXPECT_EQ(tier_asks_.load(), 1);
  if (fake()) {
    // Opening reached the server over TCP only.
    EXPECT_EQ(fabric_.writes(), 0);
    EXPECT_EQ(fabric_.reads(), 0);
  }
  const std::vector<size_t> sizes = {kBlockBytes, 1000, 1};
  std::vector<std::vector<std::byte>> data;
  std::vector<WriteOp> writes;
  for (size_t i = 0; i < sizes.size(); ++i) data.push_back(BlockBytes(TestKey(i), sizes[i]));
  for (size_t i = 0; i < sizes.size(); ++i) writes.push_back({TestKey(i), data[i]});
  Completion w = tier_->Write(kNs, writes);
  ASSERT_TRUE(w.WaitFor(kWait).ok()) << w.status().ToString();
  EXPECT_EQ(server_->GetStats().used_slots, sizes.size());
  if (fake()) {
    EXPECT_EQ(fabric_.writes(), 3);
    EXPECT_EQ(fabric_.reads(), 0);
  }

  std::vector<std::vector<std::byte>> out(sizes.size(),
                                          std::vector<std::byte>(kBlockBytes, std::byte{0xEE}));
  std::vector<ReadOp> reads;
  for (size_t i = 0; i < sizes.size(); ++i) reads.push_back({TestKey(i), out[i]});
  Completion r = tier_->Read(kNs, reads);
  ASSERT_TRUE(r.WaitFor(kWait).ok()) << r.status().ToString();
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(r.bytes(i), sizes[i]) << i;
    EXPECT_TRUE(std::equal(data[i].begin(), data[i].end(), out[i].begin())) << i;
    // Nothing past the block was written.
    EXPECT_TRUE(std::all_of(out[i].begin() + sizes[i], out[i].end(), [](std::byte b) {
      return b == std::byte{0xEE};
    })) << i;
  }
  if (fake()) {
    EXPECT_EQ(fabric_.writes(), 3);
    EXPECT_EQ(fabric_.reads(), 3);
  }
  // The round trip asked for no device beyond the one taken at open.
  EXPECT_EQ(tier_asks_.load(), 1);
}

// Writes from the registered arena and reads back into it.
// REQUIRES: the tier has registered `arena` (4 blocks).
void ArenaRoundTrip(Tier& tier, std::span<std::byte> arena) {
  const std::vector<std::byte> data = BlockBytes(TestKey(7), kBlockBytes);
  std::copy(data.begin(), data.end(), arena.begin());
  const WriteOp w{TestKey(7), arena.first(kBlockBytes)};
  Completion put = tier.Write(kNs, std::span(&w, 1));
  ASSERT_TRUE(put.WaitFor(kWait).ok()) << put.status().ToString();
  const ReadOp r{TestKey(7), arena.subspan(2 * kBlockBytes, kBlockBytes)};
  Completion get = tier.Read(kNs, std::span(&r, 1));
  ASSERT_TRUE(get.WaitFor(kWait).ok()) << get.status().ToString();
  EXPECT_EQ(get.bytes(0), kBlockBytes);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), r.dst.begin()));
}

// The tier reaches every server at open, so its links are connected before
// the runtime registers its arena; they must take the arena then, or its
// blocks would all go through staging. On the stand-in: the link made at open
// (no queue pair is made after it) moved both payloads in place, one WRITE
// and one READ. On a real device the round trip shows only that the arena's
// key is valid (a wrong one fails as a local protection error).
TEST_P(RemoteTierRdmaTest, AnArenaRegisteredAfterOpenIsUsedInPlace) {
  const int queue_pairs = fabric_.queue_pairs();
  std::vector<std::byte> arena(4 * kBlockBytes);
  ASSERT_EQ(tier_->RegisterHostMemory(arena), arena.size());
  ASSERT_NO_FATAL_FAILURE(ArenaRoundTrip(*tier_, arena));
  if (fake()) {
    EXPECT_GT(queue_pairs, 0);
    EXPECT_EQ(fabric_.queue_pairs(), queue_pairs);
    EXPECT_EQ(fabric_.pieces_with_key(fabric_.KeyOf(arena.data())), 2);
    EXPECT_EQ(fabric_.writes(), 1);
    EXPECT_EQ(fabric_.reads(), 1);
  }
  EXPECT_EQ(tier_asks_.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Device, RemoteTierRdmaTest, KVTIER_RDMA_DEVICES, RdmaDevName);

// A device that fails to open is the tier's error, under the tier's name,
// with its code and message kept. It is asked before the secret is read
// (the secret file here does not exist) and before any server is tried
// (port 1 has none).
TEST(RemoteTierRdmaOpenTest, AFailedDeviceIsTheTiersError) {
  const std::vector<Status> whys = {
      Status::NotSupported("no RDMA device here; use transport: tcp"),
      Status::IOError("ibv_open_device: Permission denied"),
  };
  for (const Status& why : whys) {
    std::atomic<int> asks{0};
    memd::RdmaDeviceFactory failing = [&why]() -> Result<std::unique_ptr<memd::RdmaDevice>> {
      return why;
    };
    TierOptions o = TierOptionsFor(1, "rdma");
    o.remote.secret.clear();
    o.remote.secret_file = ::testing::TempDir() + "/no-such-dir/secret";
    auto tier = internal::NewRemoteTierOn(o, Context(), Counted(failing, asks));
    ASSERT_FALSE(tier.ok()) << why.ToString();
    EXPECT_EQ(tier.status().code(), why.code());
    const std::string prefix = std::string("tier '") + kTierName + "'";
    EXPECT_EQ(tier.status().message().rfind(prefix, 0), 0u) << tier.status().ToString();
    EXPECT_EQ(tier.status().message(), prefix + ": " + std::string(why.message()));
    EXPECT_EQ(asks.load(), 1);
  }
}

// transport: tcp never asks for a device.
TEST(RemoteTierRdmaOpenTest, TcpTransportAsksForNoDevice) {
  auto s = MemdServer::Start(ServerOptions("tcp"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::atomic<int> asks{0};
  FakeRdmaFabric fabric;
  auto tier = internal::NewRemoteTierOn(TierOptionsFor((*s)->port(), "tcp"), Context(),
                                        Counted(fabric.Factory(), asks));
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const std::vector<std::byte> data = BlockBytes(TestKey(3), 512);
  const WriteOp w{TestKey(3), data};
  Completion put = (*tier)->Write(kNs, std::span(&w, 1));
  EXPECT_TRUE(put.WaitFor(kWait).ok()) << put.status().ToString();
  (*tier)->Shutdown();
  (*s)->Stop();
  EXPECT_EQ(asks.load(), 0);
  EXPECT_EQ(fabric.writes(), 0);
}

}  // namespace
}  // namespace kvtier::testing
