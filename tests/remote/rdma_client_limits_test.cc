// The remote client (transport: rdma, on the stand-in device) where a limit
// is reached: the server's cap on PUT_BEGIN items begun and not yet
// committed on one connection, and a local shortage of registered staging
// memory. Neither may cost the connection: the client keeps under the cap by
// holding puts back, and a shortage fails only the request that met it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "kvtier/env.h"
#include "tests/remote/fake_rdma_device.h"
#include "tests/remote/memd_test_options.h"
#include "tests/remote/scripted_memd.h"
#include "tests/support/block_data.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/memd_server_impl.h"
#include "tiers/remote/rdma_protocol.h"

namespace kvtier::testing {
namespace {

using memd::Opcode;

constexpr NamespaceId kNs{13};
constexpr char kSecret[] = "rdma-limits-secret";
constexpr auto kWait = std::chrono::seconds(5);

// The client's budget is the server's cap.
static_assert(memd::kMaxBegunPutItems == memd::kMaxReservedItems);

// Waits up to kWait for `flag`.
bool WaitForFlag(const std::atomic<bool>& flag) {
  const auto end = std::chrono::steady_clock::now() + kWait;
  while (!flag.load() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return flag.load();
}

memd::RemoteClientOptions RdmaOptions(const std::string& endpoint, memd::RdmaDeviceFactory device) {
  memd::RemoteClientOptions o;
  o.servers = {endpoint};
  o.secret = kSecret;
  o.transport = "rdma";
  o.rdma_device = std::move(device);
  o.connections = 1;
  o.connect_timeout_ms = 1000;
  o.op_timeout_ms = 3000;
  o.reconnect_backoff_ms = 1;
  o.reconnect_backoff_max_ms = 1;
  return o;
}

// One more full batch than the cap allows in flight: the scripted server
// answers nothing until it has read the cap's worth of PUT_BEGINs and the
// caller has issued the last batch too. Then the next frame must be the
// first batch's PUT_COMMIT (after its PUT_GRANT), not the last PUT_BEGIN,
// which may follow only the first batch's STATUS_REPLY. Every slot is
// refused, so no RDMA operation is involved. Before, the client sent every
// PUT_BEGIN at once and the real server cut the connection off.
TEST(RdmaClientLimitsTest, PutsBeyondTheServersCapWaitForCommits) {
  constexpr size_t kBatches = memd::kMaxBegunPutItems / memd::kMaxBatchItems + 1;
  FakeRdmaFabric fabric;
  std::vector<std::byte> pool_bytes(4096);
  FakeRdmaMemory pool(fabric, pool_bytes);
  std::atomic<bool> all_issued{false};
  ScriptedMemd server([&](ScriptedConn& c) {
    if (!c.Welcome(kSecret, 64 << 10)) return;
    auto hello = c.ReadFrame();
    ASSERT_TRUE(hello.has_value());
    ASSERT_EQ(hello->first.opcode, Opcode::kRdmaHello);
    const memd::RdmaReady ready{{0x77, 0, {}, 1}, pool.region(), 1000};
    c.Send(memd::Frame(Opcode::kRdmaReady, 0, memd::EncodeBody(ready)));
    const memd::GrantList refused{std::vector<memd::RemoteSlot>(
        memd::kMaxBatchItems, memd::RemoteSlot{StatusCode::kResourceExhausted, 0, 0, 0})};
    const memd::StatusList codes{
        std::vector<StatusCode>(memd::kMaxBatchItems, StatusCode::kResourceExhausted)};
    std::vector<uint32_t> ids;
    for (size_t i = 0; i + 1 < kBatches; ++i) {
      auto begin = c.ReadFrame();
      ASSERT_TRUE(begin.has_value());
      ASSERT_EQ(begin->first.opcode, Opcode::kPutBegin);
      ids.push_back(begin->first.request_id);
    }
    ASSERT_TRUE(WaitForFlag(all_issued));
    c.Send(memd::Frame(Opcode::kPutGrant, ids[0], memd::EncodeBody(refused)));
    auto commit = c.ReadFrame();
    ASSERT_TRUE(commit.has_value());
    ASSERT_EQ(commit->first.opcode, Opcode::kPutCommit)
        << "a PUT_BEGIN past the server's cap of " << memd::kMaxBegunPutItems << " items";
    ASSERT_EQ(commit->first.request_id, ids[0]);
    c.Send(memd::Frame(Opcode::kStatusReply, ids[0], memd::EncodeBody(codes)));
    auto last = c.ReadFrame();
    ASSERT_TRUE(last.has_value());
    ASSERT_EQ(last->first.opcode, Opcode::kPutBegin);
    ids.push_back(last->first.request_id);
    for (size_t i = 1; i < ids.size(); ++i) {
      c.Send(memd::Frame(Opcode::kPutGrant, ids[i], memd::EncodeBody(refused)));
      auto f = c.ReadFrame();
      ASSERT_TRUE(f.has_value());
      ASSERT_EQ(f->first.opcode, Opcode::kPutCommit);
      c.Send(memd::Frame(Opcode::kStatusReply, f->first.request_id, memd::EncodeBody(codes)));
    }
    c.Drain(1);  // until the client hangs up
  });
  auto client = memd::RemoteClient::Create(RdmaOptions(server.endpoint(), fabric.Factory()),
                                           StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::vector<std::byte> payload(1, std::byte{9});
  std::vector<ItemResults> puts;
  for (size_t b = 0; b < kBatches; ++b) {
    std::vector<memd::PutOp> ops;
    for (uint64_t i = 0; i < memd::kMaxBatchItems; ++i) {
      ops.push_back({BlockKey{b, i}, payload, std::nullopt});
    }
    puts.emplace_back(ops.size());
    (*client)->Put(0, kNs, std::move(ops), puts.back().Done());
  }
  all_issued = true;
  for (size_t b = 0; b < kBatches; ++b) {
    ASSERT_TRUE(puts[b].WaitFor(kWait)) << "batch " << b;
    for (size_t i = 0; i < memd::kMaxBatchItems; i += 1000) {
      EXPECT_EQ(puts[b].status(i).code(), StatusCode::kResourceExhausted)
          << "batch " << b << " item " << i << ": " << puts[b].status(i).ToString();
    }
  }
  (*client)->Shutdown();
  server.Join();
}

// The stand-in device, refusing every registration while `fail` is set.
class RegistrationFaultDevice final : public memd::RdmaDevice {
 public:
  RegistrationFaultDevice(std::unique_ptr<memd::RdmaDevice> inner,
                          std::shared_ptr<std::atomic<bool>> fail)
      : inner_(std::move(inner)), fail_(std::move(fail)) {}
  Result<std::unique_ptr<memd::RdmaMemory>> Register(std::span<std::byte> b) override {
    if (fail_->load()) return Status::IOError("ibv_reg_mr: Cannot allocate memory");
    return inner_->Register(b);
  }
  Result<std::unique_ptr<memd::RdmaQp>> CreateQp() override { return inner_->CreateQp(); }

 private:
  std::unique_ptr<memd::RdmaDevice> inner_;
  std::shared_ptr<std::atomic<bool>> fail_;
};

// No staging memory can be registered for a GET or a PUT (the connection's
// staging pool registers its first buffer on first use): each fails with
// ResourceExhausted, the PUT's slot goes back to the server, and once
// registration works again the same connection serves both. Before, the
// shortage was taken for a bad reply from the server and closed the
// connection, failing everything on it with IOError.
TEST(RdmaClientLimitsTest, NoStagingMemoryFailsOnlyThatRequest) {
  FakeRdmaFabric fabric;
  memd::MemdServerOptions so = SmallMemdOptions(kSecret, "rdma");
  so.rdma_device = fabric.Factory();
  auto server = memd::MemdServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string endpoint = "127.0.0.1:" + std::to_string((*server)->port());
  const BlockKey stored = TestKey(1);
  const std::vector<std::byte> data = BlockBytes(stored, 4000);
  int per_connection = -fabric.queue_pairs();  // the client's and the server's
  {
    auto writer = memd::RemoteClient::Create(RdmaOptions(endpoint, fabric.Factory()),
                                             StderrLogSink(LogLevel::kError), nullptr);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    ItemResults put(1);
    (*writer)->Put(0, kNs, {{stored, data, std::nullopt}}, put.Done());
    ASSERT_TRUE(put.WaitFor(kWait));
    ASSERT_TRUE(put.status(0).ok()) << put.status(0).ToString();
    (*writer)->Shutdown();
  }
  per_connection += fabric.queue_pairs();
  auto fail = std::make_shared<std::atomic<bool>>(true);
  memd::RdmaDeviceFactory faulty = [&fabric, fail]() -> Result<std::unique_ptr<memd::RdmaDevice>> {
    auto inner = fabric.Factory()();
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<memd::RdmaDevice>(
        new RegistrationFaultDevice(std::move(inner).value(), fail));
  };
  auto client = memd::RemoteClient::Create(RdmaOptions(endpoint, faulty),
                                           StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const int queue_pairs_before = fabric.queue_pairs();
  std::vector<std::byte> out(4000);
  const BlockKey fresh = TestKey(2);
  const std::vector<std::byte> fresh_data = BlockBytes(fresh, 4000);
  ItemResults get(1), put(1);
  (*client)->Get(0, kNs, {out}, {stored}, get.Done());
  ASSERT_TRUE(get.WaitFor(kWait));
  (*client)->Put(0, kNs, {{fresh, fresh_data, std::nullopt}}, put.Done());
  ASSERT_TRUE(put.WaitFor(kWait));
  for (const Status& s : {get.status(0), put.status(0)}) {
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_NE(s.message().find("no registered staging memory"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("ibv_reg_mr: Cannot allocate memory"), std::string::npos)
        << s.ToString();
  }

  fail->store(false);
  ItemResults get_again(1), put_again(1);
  (*client)->Get(0, kNs, {out}, {stored}, get_again.Done());
  (*client)->Put(0, kNs, {{fresh, fresh_data, std::nullopt}}, put_again.Done());
  ASSERT_TRUE(get_again.WaitFor(kWait));
  ASSERT_TRUE(put_again.WaitFor(kWait));
  EXPECT_TRUE(get_again.status(0).ok()) << get_again.status(0).ToString();
  EXPECT_TRUE(out == data) << "the stored block reads back";
  EXPECT_TRUE(put_again.status(0).ok()) << put_again.status(0).ToString();
  EXPECT_EQ(fabric.queue_pairs(), queue_pairs_before + per_connection)
      << "one connection served all four";
  // The refused PUT's slot went back with its commit; none is held twice.
  EXPECT_EQ((*server)->GetStats().used_slots, 2u);
  (*client)->Shutdown();
  (*server)->Stop();
}

}  // namespace
}  // namespace kvtier::testing
