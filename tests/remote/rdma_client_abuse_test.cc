// The remote client (transport: rdma, on the stand-in device) against a
// scripted server that holds the shared secret but answers one request
// twice: two LEASE_REPLYs, a LEASE_REPLY and then a GET_STATUS, two
// PUT_GRANTs. The completions of the first answer's RDMA operations are held
// back until the client has seen the second, so a client that starts a
// second batch (or finishes the request) under the first would later write
// into a buffer it had already handed back. The client must instead close the
// connection, fail the request once with a clear status and leave the
// caller's buffer untouched. Also the link path's own guard: a READ that
// completes after its request finished copies nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "tests/remote/fake_rdma_device.h"
#include "tests/remote/scripted_memd.h"
#include "tiers/remote/rdma_link.h"
#include "tiers/remote/rdma_protocol.h"

namespace kvtier::testing {
namespace {

using memd::Opcode;
using Clock = std::chrono::steady_clock;

constexpr NamespaceId kNs{12};
constexpr char kSecret[] = "rdma-abuse-secret";
constexpr BlockKey kKey{5, 6};
constexpr size_t kPayloadBytes = 4000;
constexpr uint64_t kStoredBytes = kBlockHeaderBytes + kPayloadBytes;
constexpr size_t kSecondSlot = 32 << 10;

// Waits up to 2 s for `done`.
template <typename Pred>
bool Eventually(Pred done) {
  const auto end = Clock::now() + std::chrono::seconds(2);
  while (!done() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

// The server's pool on the stand-in fabric, holding two stored versions of
// kKey with different payloads: at offset 0 and at kSecondSlot.
class RemotePool {
 public:
  explicit RemotePool(FakeRdmaFabric& fabric)
      : bytes_(64 << 10), mem_(fabric, std::span<std::byte>(bytes_)) {
    Store(0, std::byte{0x11});
    Store(kSecondSlot, std::byte{0x22});
  }
  memd::RdmaRegion region() const { return mem_.region(); }
  memd::RemoteSlot Slot(size_t offset) const {
    return {StatusCode::kOk, region().addr + offset, region().rkey, kStoredBytes};
  }

 private:
  void Store(size_t offset, std::byte fill) {
    std::span<std::byte> payload(bytes_.data() + offset + kBlockHeaderBytes, kPayloadBytes);
    std::fill(payload.begin(), payload.end(), fill);
    EncodeBlockHeader(MakeBlockHeader(kNs, kKey, payload),
                      std::span(bytes_.data() + offset, kBlockHeaderBytes));
  }
  std::vector<std::byte> bytes_;
  FakeRdmaMemory mem_;
};

// Handshake and RDMA_HELLO -> RDMA_READY; then the first request frame.
std::optional<ClientFrame> OpenRdma(ScriptedConn& c, const RemotePool& pool) {
  if (!c.Welcome(kSecret, 64 << 10)) return std::nullopt;
  auto hello = c.ReadFrame();
  if (!hello || hello->first.opcode != Opcode::kRdmaHello) return std::nullopt;
  const memd::RdmaReady ready{{0x77, 0, {}, 1}, pool.region(), 1000};
  c.Send(memd::Frame(Opcode::kRdmaReady, 0, memd::EncodeBody(ready)));
  return c.ReadFrame();
}

class RdmaClientAbuseTest : public ::testing::Test {
 protected:
  void SetUp() override { fabric_.Hold(true); }
  void TearDown() override { fabric_.Hold(false); }
  std::unique_ptr<memd::RemoteClient> Connect(const ScriptedMemd& server) {
    memd::RemoteClientOptions o = ScriptedClientOptions(server, kSecret, 1000);
    o.transport = "rdma";
    o.rdma_device = fabric_.Factory();
    auto c = memd::RemoteClient::Create(o, StderrLogSink(LogLevel::kError), nullptr);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // Sends `first` for the request, waits for its READ (or WRITE) to be
  // posted, sends `second`, then waits for the client to close the
  // connection or post a second batch before the held completions go.
  void AnswerTwice(ScriptedConn& c, const std::vector<std::byte>& first,
                   const std::vector<std::byte>& second) {
    c.Send(first);
    EXPECT_TRUE(Eventually([&] { return fabric_.reads() + fabric_.writes() >= 1; }));
    c.Send(second);
    EXPECT_TRUE(Eventually([&] {
      return c.ClosedWithin(std::chrono::milliseconds(1)) ||
             fabric_.reads() + fabric_.writes() >= 2;
    }));
    fabric_.Hold(false);
  }
  // Gets kKey into a zeroed buffer: the result, and the buffer.
  std::pair<Status, std::vector<std::byte>> GetOnce(const ScriptedMemd& server) {
    auto client = Connect(server);
    if (client == nullptr) return {Status::Internal("no client"), {}};
    std::vector<std::byte> dst(kPayloadBytes);
    ItemResults get(1);
    client->Get(0, kNs, {dst}, {kKey}, get.Done());
    const bool answered = get.WaitFor(std::chrono::seconds(5));
    client->Shutdown();  // joins the loop: no completion runs after this
    if (!answered) return {Status::Internal("GET never finished"), dst};
    return {get.status(0), dst};
  }

  FakeRdmaFabric fabric_;  // first: outlives the clients
  RemotePool pool_{fabric_};
};

bool AllZero(const std::vector<std::byte>& v) {
  return std::all_of(v.begin(), v.end(), [](std::byte b) { return b == std::byte{0}; });
}

TEST_F(RdmaClientAbuseTest, ASecondLeaseReplyClosesTheLinkAndFailsTheGetOnce) {
  ScriptedMemd server([&](ScriptedConn& c) {
    auto get = OpenRdma(c, pool_);
    ASSERT_TRUE(get.has_value());
    ASSERT_EQ(get->first.opcode, Opcode::kGetLease);
    const uint32_t id = get->first.request_id;
    const memd::LeaseReply first{1, {pool_.Slot(0)}};
    const memd::LeaseReply second{2, {pool_.Slot(kSecondSlot)}};
    AnswerTwice(c, memd::Frame(Opcode::kLeaseReply, id, memd::EncodeBody(first)),
                memd::Frame(Opcode::kLeaseReply, id, memd::EncodeBody(second)));
  });
  auto [status, dst] = GetOnce(server);
  EXPECT_EQ(status.code(), StatusCode::kIOError) << status.ToString();
  EXPECT_NE(
      status.message().find("bad reply: LEASE_REPLY for a request that is not waiting for one"),
      std::string::npos)
      << status.ToString();
  EXPECT_TRUE(AllZero(dst)) << "a failed GET wrote into the caller's buffer";
}

TEST_F(RdmaClientAbuseTest, GetStatusOnAnRdmaLinkClosesTheLink) {
  ScriptedMemd server([&](ScriptedConn& c) {
    auto get = OpenRdma(c, pool_);
    ASSERT_TRUE(get.has_value());
    ASSERT_EQ(get->first.opcode, Opcode::kGetLease);
    const uint32_t id = get->first.request_id;
    const memd::LeaseReply lease{1, {pool_.Slot(0)}};
    const std::vector<std::byte> missing = {std::byte{memd::EncodeCode(StatusCode::kNotFound)}};
    AnswerTwice(c, memd::Frame(Opcode::kLeaseReply, id, memd::EncodeBody(lease)),
                memd::Frame(Opcode::kGetStatus, id, missing, 0));
  });
  auto [status, dst] = GetOnce(server);
  EXPECT_EQ(status.code(), StatusCode::kIOError) << status.ToString();
  EXPECT_NE(status.message().find("bad reply: GET_STATUS on an RDMA connection"), std::string::npos)
      << status.ToString();
  EXPECT_TRUE(AllZero(dst)) << "a failed GET wrote into the caller's buffer";
}

TEST_F(RdmaClientAbuseTest, ASecondPutGrantClosesTheLinkBeforeAnyCommit) {
  int commits = 0;
  ScriptedMemd server([&](ScriptedConn& c) {
    auto put = OpenRdma(c, pool_);
    ASSERT_TRUE(put.has_value());
    ASSERT_EQ(put->first.opcode, Opcode::kPutBegin);
    const uint32_t id = put->first.request_id;
    const memd::GrantList first{{pool_.Slot(0)}};
    const memd::GrantList second{{pool_.Slot(kSecondSlot)}};
    AnswerTwice(c, memd::Frame(Opcode::kPutGrant, id, memd::EncodeBody(first)),
                memd::Frame(Opcode::kPutGrant, id, memd::EncodeBody(second)));
    for (auto f = c.ReadFrame(); f.has_value(); f = c.ReadFrame()) {
      commits += f->first.opcode == Opcode::kPutCommit;
    }
  });
  auto client = Connect(server);
  ASSERT_NE(client, nullptr);
  const std::vector<std::byte> payload(kPayloadBytes, std::byte{0x33});
  ItemResults put(1);
  client->Put(0, kNs, {{kKey, payload, std::nullopt}}, put.Done());
  ASSERT_TRUE(put.WaitFor(std::chrono::seconds(5)));
  EXPECT_EQ(put.status(0).code(), StatusCode::kIOError) << put.status(0).ToString();
  EXPECT_NE(put.status(0).message().find("PUT_GRANT for a request that is not waiting for one"),
            std::string::npos)
      << put.status(0).ToString();
  client->Shutdown();
  server.Join();
  EXPECT_EQ(commits, 0);
}

// RdmaLinkPath on its own: a READ whose completion comes after the owner of
// its outputs let go copies neither header nor payload.
TEST_F(RdmaClientAbuseTest, AReadCompletingAfterItsRequestFinishedCopiesNothing) {
  FakeRdmaDevice device(fabric_);
  std::mutex mu;
  std::deque<std::function<void()>> posted;  // guarded by mu
  memd::LoopPost post = [&](std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu);
    posted.push_back(std::move(fn));
  };
  auto path = memd::RdmaLinkPath::Create(device, nullptr, post);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  ASSERT_TRUE((*path)->Connect({{0x77, 0, {}, 1}, pool_.region(), 1000}).ok());
  std::vector<std::byte> dst(kPayloadBytes);
  std::vector<std::byte> dst_copy = dst;
  std::vector<memd::HeaderBytes> headers(1);
  std::vector<std::span<std::byte>> dsts = {dst};
  auto outputs = std::make_shared<const bool>(true);
  bool done = false;
  Status item;
  const memd::LeaseReply lease{1, {pool_.Slot(0)}};
  ASSERT_TRUE((*path)
                  ->ReadLeased(lease, dsts, headers, outputs,
                               [&](std::vector<Status> items, std::vector<uint64_t>) {
                                 done = true;
                                 item = items[0];
                               })
                  .ok());
  ASSERT_EQ(fabric_.reads(), 1);
  outputs.reset();  // the request finished (failed) before the READ completed
  fabric_.Hold(false);
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !posted.empty();
  }));
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu);
    fn = std::move(posted.front());
    posted.pop_front();
  }
  fn();  // on this thread, standing in for the loop
  EXPECT_TRUE(done);
  EXPECT_TRUE(item.ok()) << item.ToString();
  EXPECT_EQ(dst, dst_copy);
  EXPECT_EQ(headers[0], memd::HeaderBytes{});
}

}  // namespace
}  // namespace kvtier::testing
