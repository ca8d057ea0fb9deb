// The RDMA data path end to end: an in-process kvtier-memd with transport
// rdma and a RemoteClient with transport rdma, on the stand-in device (every
// build) or on a real device (the `rdma`-labelled binary; skips without one).
// Blocks move one-sided; the TCP connection carries only control frames.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <thread>

#include "tests/remote/fake_rdma_device.h"
#include "tests/remote/memd_test_options.h"
#include "tests/support/returns_within.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/remote_client.h"

namespace kvtier::testing {
namespace {

using memd::MemdServer;
using memd::PutOp;
using memd::RemoteClient;
using Clock = std::chrono::steady_clock;

constexpr NamespaceId kNs{7};
constexpr uint32_t kTimeoutMs = 1000;

struct Outcome {
  std::vector<Status> status;
  std::vector<uint64_t> bytes;
};

// Collects one result per item and waits for all of them. The state is
// shared with the callbacks: the last one may still be returning when the
// waiter has gone.
class Waiter {
 public:
  explicit Waiter(size_t n) : st_(std::make_shared<State>()) {
    st_->out = {std::vector<Status>(n), std::vector<uint64_t>(n)};
    st_->left = n;
  }
  memd::ItemDone Done() {
    return [st = st_](size_t i, const Status& s, uint64_t b) {
      std::lock_guard<std::mutex> lock(st->mu);
      st->out.status[i] = s;
      st->out.bytes[i] = b;
      if (--st->left == 0) st->cv.notify_all();
    };
  }
  Outcome Wait() {
    std::unique_lock<std::mutex> lock(st_->mu);
    st_->cv.wait(lock, [&] { return st_->left == 0; });
    return st_->out;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    Outcome out;
    size_t left = 0;
  };
  std::shared_ptr<State> st_;
};

std::vector<std::byte> Pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(i * 31 + seed));
  return v;
}

memd::MemdServerOptions ServerOptions() { return SmallMemdOptions("rdma-test-secret", "rdma"); }

memd::RemoteClientOptions ClientOptions(uint16_t port) {
  memd::RemoteClientOptions co;
  co.servers = {"127.0.0.1:" + std::to_string(port)};
  co.secret = "rdma-test-secret";
  co.connections = 1;
  co.op_timeout_ms = kTimeoutMs;
  co.reconnect_backoff_ms = 1;
  co.reconnect_backoff_max_ms = 1;
  co.transport = "rdma";
  return co;
}

class RdmaPathTest : public ::testing::TestWithParam<RdmaDev> {
 protected:
  void SetUp() override {
    auto f = DeviceFor(GetParam(), fabric_);
    if (!f.ok()) GTEST_SKIP() << "no RDMA device: " << f.status().message();
    factory_ = *f;
    memd::MemdServerOptions o = ServerOptions();
    o.rdma_device = Counted(factory_, server_opens_);
    auto s = MemdServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    memd::RemoteClientOptions co = ClientOptions(server_->port());
    co.rdma_device = Counted(factory_, client_opens_);
    auto c = RemoteClient::Create(co, StderrLogSink(LogLevel::kError), nullptr);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    if (server_) server_->Stop();
  }
  Outcome Put(std::vector<PutOp> ops) {
    Waiter w(ops.size());
    client_->Put(0, kNs, std::move(ops), w.Done());
    return w.Wait();
  }
  Outcome Get(std::vector<std::span<std::byte>> dsts, std::vector<BlockKey> keys) {
    Waiter w(keys.size());
    client_->Get(0, kNs, std::move(dsts), std::move(keys), w.Done());
    return w.Wait();
  }

  FakeRdmaFabric fabric_;  // first: outlives the server and the client
  memd::RdmaDeviceFactory factory_;
  std::atomic<int> server_opens_{0};
  std::atomic<int> client_opens_{0};
  std::unique_ptr<MemdServer> server_;
  std::unique_ptr<RemoteClient> client_;
};

TEST_P(RdmaPathTest, BlocksRoundTripOneSided) {
  const auto a = Pattern(10000, 1), b = Pattern(20000, 2), c = Pattern(1, 3);
  Outcome put = Put({{{1, 1}, a}, {{2, 2}, b}, {{3, 3}, c}});
  for (const Status& s : put.status) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(put.bytes, (std::vector<uint64_t>{10000, 20000, 1}));
  std::vector<std::byte> da(10000), db(30000), dc(1), small(100), miss(10);
  Outcome get = Get({da, db, dc, small, miss}, {{1, 1}, {2, 2}, {3, 3}, {2, 2}, {9, 9}});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(get.status[i].ok()) << get.status[i].ToString();
  EXPECT_EQ(get.bytes, (std::vector<uint64_t>{10000, 20000, 1, 0, 0}));
  EXPECT_EQ(da, a);
  EXPECT_TRUE(std::equal(b.begin(), b.end(), db.begin()));
  EXPECT_EQ(dc, c);
  EXPECT_EQ(get.status[3].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      get.status[3].message().find("destination of 100 bytes is smaller than the block's 20000"),
      std::string::npos)
      << get.status[3].ToString();
  EXPECT_EQ(get.status[4].code(), StatusCode::kNotFound);
  const memd::Stats st = server_->GetStats();
  EXPECT_EQ(st.used_slots, 3u);
  if (GetParam() == RdmaDev::kFake) {
    EXPECT_EQ(fabric_.writes(), 3);
    EXPECT_EQ(fabric_.reads(), 3);
  }
}

TEST_P(RdmaPathTest, RegisteredHostMemoryMovesWithoutStaging) {
  std::vector<std::byte> arena(256 << 10);
  ASSERT_EQ(client_->RegisterHostMemory(arena), arena.size());
  const auto data = Pattern(50000, 9);
  std::copy(data.begin(), data.end(), arena.begin());
  std::span<std::byte> src(arena.data(), data.size());
  std::span<std::byte> dst(arena.data() + (128 << 10), data.size());
  Outcome put = Put({{{4, 4}, src}});
  ASSERT_TRUE(put.status[0].ok()) << put.status[0].ToString();
  Outcome get = Get({dst}, {{4, 4}});
  ASSERT_TRUE(get.status[0].ok()) << get.status[0].ToString();
  EXPECT_TRUE(std::equal(data.begin(), data.end(), dst.begin()));
  if (GetParam() == RdmaDev::kFake) {
    // The payload of the write and of the read used the arena in place.
    EXPECT_EQ(fabric_.pieces_with_key(fabric_.KeyOf(arena.data())), 2);
  }
}

TEST_P(RdmaPathTest, StagingBuffersAreReusedAcrossBatches) {
  // Payloads outside any registered memory: headers and payloads both go
  // through staging, for the write and for the read.
  auto round = [&](uint64_t k) {
    const int seed = static_cast<int>(k);
    const auto a = Pattern(30000, seed), b = Pattern(7, seed + 1);
    Outcome put = Put({{{k, 1}, a}, {{k, 2}, b}});
    for (const Status& s : put.status) ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<std::byte> da(a.size()), db(b.size());
    Outcome get = Get({da, db}, {{k, 1}, {k, 2}});
    for (const Status& s : get.status) ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(da, a);
    ASSERT_EQ(db, b);
  };
  ASSERT_NO_FATAL_FAILURE(round(1));
  const int registrations = fabric_.registrations();
  const size_t registered = fabric_.registered();
  for (uint64_t k = 2; k < 60; ++k) ASSERT_NO_FATAL_FAILURE(round(k));
  if (GetParam() == RdmaDev::kFake) {
    // 116 batches more, not one more registration: the first batch's
    // staging buffer served them all.
    EXPECT_EQ(fabric_.registrations(), registrations);
    EXPECT_EQ(fabric_.registered(), registered);
    EXPECT_EQ(fabric_.writes(), 2 * 59);
    EXPECT_EQ(fabric_.reads(), 2 * 59);
  }
}

TEST_P(RdmaPathTest, AFailedCompletionFailsItsBatchAndTheLinkReconnects) {
  if (GetParam() != RdmaDev::kFake) GTEST_SKIP() << "needs the stand-in's fault injection";
  const auto a = Pattern(5000, 4);
  ASSERT_TRUE(Put({{{1, 1}, a}}).status[0].ok());  // connected
  fabric_.FailNext(1);
  Outcome put = Put({{{5, 5}, a}, {{6, 6}, a}});
  for (const Status& s : put.status) {
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_NE(s.message().find("RDMA WRITE: RDMA completion: transport retry counter exceeded"),
              std::string::npos)
        << s.ToString();
  }
  // The server cancelled the uncommitted grants with the connection.
  Status later;
  for (int i = 0; i < 200; ++i) {
    later = Put({{{5, 5}, a}}).status[0];
    if (later.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // reconnect backoff (1 ms)
  }
  EXPECT_TRUE(later.ok()) << later.ToString();
  EXPECT_EQ(server_->GetStats().used_slots, 2u);
}

TEST_P(RdmaPathTest, ServerStoppedMidBatchFailsItsBlocksWithinTheDeadline) {
  const auto a = Pattern(60000, 5);
  ASSERT_TRUE(Put({{{1, 1}, a}}).status[0].ok());  // connected
  // On the stand-in the blocks are written but their completions are held,
  // so the batch is certainly in flight when the server goes away.
  if (GetParam() == RdmaDev::kFake) fabric_.Hold(true);
  std::vector<PutOp> ops;
  for (uint64_t k = 10; k < 22; ++k) ops.push_back({{k, k}, a});
  Waiter w(ops.size());
  client_->Put(0, kNs, std::move(ops), w.Done());
  if (GetParam() == RdmaDev::kFake) {
    // Every block of the batch is written; none is committed yet.
    for (int i = 0; i < 2000 && fabric_.writes() < 13; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(fabric_.writes(), 13);
  }
  const auto start = Clock::now();
  server_->Stop();
  Outcome put = w.Wait();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  EXPECT_LE(ms, kTimeoutMs + 1000) << "the batch ends at its deadline, with room for a busy host";
  size_t failed = 0;
  for (const Status& s : put.status) failed += s.ok() ? 0 : 1;
  if (GetParam() == RdmaDev::kFake) {
    EXPECT_EQ(failed, 12u);
    fabric_.Hold(false);
  } else {
    EXPECT_GT(failed, 0u);
  }
}

// The server and the client each open their device once, at start, and a
// round trip opens nothing more. (A reconnect takes the client's stored
// device too, Link::StartRdma; no test here makes the client reconnect.)
TEST_P(RdmaPathTest, ServerAndClientEachOpenTheDeviceOnce) {
  EXPECT_EQ(server_opens_.load(), 1);
  EXPECT_EQ(client_opens_.load(), 1);
  const auto a = Pattern(3000, 6);
  ASSERT_TRUE(Put({{{1, 1}, a}}).status[0].ok());
  std::vector<std::byte> d(a.size());
  ASSERT_TRUE(Get({d}, {{1, 1}}).status[0].ok());
  EXPECT_EQ(d, a);
  EXPECT_EQ(server_opens_.load(), 1);
  EXPECT_EQ(client_opens_.load(), 1);
}

// A post refused by a full completion queue while nothing of this link is
// in flight has no completion to retry it: the link's tick does, well
// within the request's 1 s deadline.
TEST_P(RdmaPathTest, AFullCompletionQueueIsRetriedWithNothingInFlight) {
  if (GetParam() != RdmaDev::kFake) GTEST_SKIP() << "refuses posts on the stand-in";
  fabric_.BusyNext(3);
  const std::vector<std::byte> payload(3000, std::byte{5});
  const Outcome put = Put({{BlockKey{1, 9}, payload, std::nullopt}});
  ASSERT_EQ(put.status.size(), 1u);
  EXPECT_TRUE(put.status[0].ok()) << put.status[0].ToString();
  EXPECT_EQ(put.bytes[0], payload.size());
  EXPECT_EQ(fabric_.writes(), 1);
}

// After Shutdown (client) or Stop (server) the loop is gone: a call that
// still posted to it would wait forever. Each must answer at once instead.
TEST_P(RdmaPathTest, CallsAfterShutdownAnswerAtOnce) {
  const std::vector<std::byte> stored(100, std::byte{2});
  const Outcome first = Put({{BlockKey{1, 2}, stored, std::nullopt}});
  ASSERT_TRUE(first.status[0].ok()) << first.status[0].ToString();
  client_->Shutdown();
  std::vector<std::byte> arena(64 << 10);
  uint64_t registered = 1;
  EXPECT_TRUE(ReturnsWithin([&] { registered = client_->RegisterHostMemory(arena); },
                            std::chrono::seconds(5)));
  EXPECT_EQ(registered, 0u);
  Result<memd::Stats> stats = Status::Ok();
  EXPECT_TRUE(ReturnsWithin([&] { stats = client_->GetStats(0); }, std::chrono::seconds(5)));
  EXPECT_EQ(stats.status().code(), StatusCode::kUnavailable);
  const std::vector<std::byte> payload(100, std::byte{1});
  Outcome put;
  EXPECT_TRUE(ReturnsWithin(
      [&] {
        put = Put({{BlockKey{1, 1}, payload, std::nullopt}});
      },
      std::chrono::seconds(5)));
  ASSERT_EQ(put.status.size(), 1u);
  EXPECT_EQ(put.status[0].code(), StatusCode::kUnavailable) << put.status[0].ToString();
  server_->Stop();
  memd::Stats after;
  EXPECT_TRUE(ReturnsWithin([&] { after = server_->GetStats(); }, std::chrono::seconds(5)));
  EXPECT_EQ(after.used_slots, 1u);
}

INSTANTIATE_TEST_SUITE_P(Device, RdmaPathTest, KVTIER_RDMA_DEVICES, RdmaDevName);

// A device that fails to open fails the server's start and the client's
// creation with its own reason, untouched.
TEST(RdmaDeviceOpenTest, AFailedOpenIsTheStartError) {
  const Status why = Status::NotSupported("no device here; use transport: tcp");
  int opens = 0;
  memd::RdmaDeviceFactory failing = [&]() -> Result<std::unique_ptr<memd::RdmaDevice>> {
    ++opens;
    return why;
  };
  memd::MemdServerOptions o = ServerOptions();
  o.rdma_device = failing;
  auto s = MemdServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().ToString(), why.ToString());
  EXPECT_EQ(opens, 1);
  memd::RemoteClientOptions co = ClientOptions(1);
  co.rdma_device = failing;
  auto c = RemoteClient::Create(co, StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().ToString(), why.ToString());
  EXPECT_EQ(opens, 2);
}

// Without an injected device the server opens the machine's first one; where
// there is none (or the build lacks libibverbs) its start fails with exactly
// the reason OpenRdmaDevice gives, naming transport: tcp.
TEST(RdmaDeviceOpenTest, ServerWithoutDeviceFailsAtStartWithTheDevicesReason) {
  const auto device = memd::OpenRdmaDevice();
  if (device.ok()) GTEST_SKIP() << "an RDMA device is present; this test covers its absence";
  auto s = MemdServer::Start(ServerOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().ToString(), device.status().ToString());
  EXPECT_EQ(s.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(s.status().message().find("use transport: tcp"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::testing
