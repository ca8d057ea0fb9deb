// The remote client (transport: tcp) against a scripted server that holds
// the shared secret but breaks the protocol: a reply that comes before the
// request it answers was written out, a failure reply whose status code is
// OK, and a request that is never answered while the 32-bit request ids
// wrap. The client must close the connection and fail the request with a
// clear status, never touch a buffer after handing it back, and keep every
// deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/remote/scripted_memd.h"
#include "tiers/remote/remote_client.h"
#include "tiers/remote/remote_client_impl.h"

namespace kvtier::testing {
namespace {

using memd::Opcode;
using Clock = std::chrono::steady_clock;

constexpr NamespaceId kNs{11};
constexpr char kSecret[] = "client-abuse-secret";

std::unique_ptr<memd::RemoteClient> Connect(const ScriptedMemd& server, uint32_t op_timeout_ms) {
  auto c = memd::RemoteClient::Create(ScriptedClientOptions(server, kSecret, op_timeout_ms),
                                      StderrLogSink(LogLevel::kError), nullptr);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Waits up to `limit` for `flag`.
bool WaitForFlag(const std::atomic<bool>& flag, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (!flag.load() && Clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return flag.load();
}

// A STATUS_REPLY to a PUT while its PUT_DATA frames are still being written
// (the server's small receive buffer holds them back) cannot be an answer to
// PUT_COMMIT: the client closes the connection and fails the PUT, and once
// the caller has its results not one more byte of the request goes out.
// Before, the PUT finished OK at once and the client went on writing the
// caller's released buffers and the request's freed headers to the socket
// (heap-use-after-free under ASan).
TEST(RemoteClientAbuseTest, StatusReplyBeforePutCommitIsSentFailsThePut) {
  constexpr size_t kItems = 4;
  constexpr size_t kPayloadBytes = 8 << 20;
  constexpr uint64_t kWireBytes = kItems * (kPayloadBytes + kBlockHeaderBytes);
  std::atomic<bool> caller_done{false};
  uint64_t drained = 0;
  ScriptedMemd server(
      [&](ScriptedConn& c) {
        if (!c.Welcome(kSecret, kPayloadBytes + kBlockHeaderBytes)) return;
        auto begin = c.ReadFrame();
        ASSERT_TRUE(begin.has_value());
        ASSERT_EQ(begin->first.opcode, Opcode::kPutBegin);
        const memd::StatusList ok{std::vector<StatusCode>(kItems, StatusCode::kOk)};
        c.Send(memd::Frame(Opcode::kStatusReply, begin->first.request_id, memd::EncodeBody(ok)));
        // Reads on only once the caller has its results and has freed its
        // buffers: whatever the client still sends comes from them.
        EXPECT_TRUE(WaitForFlag(caller_done, std::chrono::seconds(5)));
        drained = c.Drain(kWireBytes);
      },
      /*receive_buffer_bytes=*/4096);
  auto client = Connect(server, 2000);
  ASSERT_NE(client, nullptr);
  {
    std::vector<std::vector<std::byte>> payloads(
        kItems, std::vector<std::byte>(kPayloadBytes, std::byte{7}));
    std::vector<memd::PutOp> ops;
    for (size_t i = 0; i < kItems; ++i) ops.push_back({BlockKey{1, i}, payloads[i], std::nullopt});
    ItemResults put(kItems);
    client->Put(0, kNs, std::move(ops), put.Done());
    ASSERT_TRUE(put.WaitFor(std::chrono::seconds(5)));
    for (size_t i = 0; i < kItems; ++i) {
      const Status s = put.status(i);
      EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
      EXPECT_NE(s.message().find("bad reply: STATUS_REPLY before PUT_COMMIT was sent"),
                std::string::npos)
          << s.ToString();
    }
  }  // the caller's buffers are gone
  caller_done = true;
  server.Join();
  EXPECT_LT(drained, kWireBytes) << "the client sent the whole PUT after failing it";
  client->Shutdown();
}

// Once a PUT's frames are all out, the same early-looking reply is the
// answer to PUT_COMMIT: the small-buffer server above is not refused for
// being slow.
TEST(RemoteClientAbuseTest, StatusReplyAfterPutCommitIsTheAnswer) {
  constexpr size_t kPayloadBytes = 1 << 20;
  ScriptedMemd server(
      [&](ScriptedConn& c) {
        if (!c.Welcome(kSecret, kPayloadBytes + kBlockHeaderBytes)) return;
        uint32_t id = 0;
        for (auto f = c.ReadFrame(); f.has_value(); f = c.ReadFrame()) {
          id = f->first.request_id;
          if (f->first.opcode == Opcode::kPutCommit) break;
        }
        const memd::StatusList ok{{StatusCode::kOk}};
        c.Send(memd::Frame(Opcode::kStatusReply, id, memd::EncodeBody(ok)));
        c.Drain(1);  // until the client hangs up
      },
      /*receive_buffer_bytes=*/4096);
  auto client = Connect(server, 2000);
  ASSERT_NE(client, nullptr);
  const std::vector<std::byte> payload(kPayloadBytes, std::byte{3});
  ItemResults put(1);
  client->Put(0, kNs, {{BlockKey{2, 2}, payload, std::nullopt}}, put.Done());
  ASSERT_TRUE(put.WaitFor(std::chrono::seconds(5)));
  EXPECT_TRUE(put.status(0).ok()) << put.status(0).ToString();
  client->Shutdown();
}

// WELCOME's slot size caps the block frames the client reads; a server that
// announces one it could not hold itself is refused before any is read.
TEST(RemoteClientAbuseTest, AnImpossibleSlotSizeInWelcomeIsRefused) {
  ScriptedMemd server([&](ScriptedConn& c) {
    if (!c.Welcome(kSecret, uint64_t{1} << 40)) return;
    c.Drain(1);  // until the client hangs up
  });
  auto client = Connect(server, 2000);
  ASSERT_NE(client, nullptr);
  ItemResults exists(1);
  client->Exists(0, kNs, {BlockKey{5, 5}}, exists.Done());
  ASSERT_TRUE(exists.WaitFor(std::chrono::seconds(5)));
  EXPECT_NE(exists.status(0).message().find("server announced a slot of 1099511627776 bytes"),
            std::string::npos)
      << exists.status(0).ToString();
  client->Shutdown();
}

// A handshake slower than op_timeout_ms but within connect_timeout_ms: a
// request waiting for it is answered. It used to fail DeadlineExceeded at
// op_timeout_ms, the connection given up and the server marked silent, so a
// tier whose servers all took that long could not open.
TEST(RemoteClientAbuseTest, ARequestWaitsForAHandshakeWithinTheConnectTimeout) {
  ScriptedMemd server([&](ScriptedConn& c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (!c.Welcome(kSecret, 4096)) return;
    auto exists = c.ReadFrame();
    ASSERT_TRUE(exists.has_value());
    ASSERT_EQ(exists->first.opcode, Opcode::kExists);
    const memd::StatusList found{{StatusCode::kOk}};
    c.Send(memd::Frame(Opcode::kStatusReply, exists->first.request_id, memd::EncodeBody(found)));
    c.Drain(1);  // until the client hangs up
  });
  memd::RemoteClientOptions o = ScriptedClientOptions(server, kSecret, /*op_timeout_ms=*/500);
  o.connect_timeout_ms = 10000;
  auto made = memd::RemoteClient::Create(o, StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<memd::RemoteClient> client = std::move(made).value();
  ItemResults exists(1);
  client->Exists(0, kNs, {BlockKey{5, 5}}, exists.Done());
  ASSERT_TRUE(exists.WaitFor(std::chrono::seconds(10)));
  EXPECT_TRUE(exists.status(0).ok()) << exists.status(0).ToString();
  client->Shutdown();
}

// A found block comes as GET_DATA; GET_STATUS carries why one was not.
// GET_STATUS with the code OK is a protocol violation: the GET fails with
// IOError, never reports a hit of 0 bytes. Before, it succeeded empty.
TEST(RemoteClientAbuseTest, GetStatusWithCodeOkIsABadReply) {
  ScriptedMemd server([&](ScriptedConn& c) {
    if (!c.Welcome(kSecret, 1 << 20)) return;
    auto get = c.ReadFrame();
    ASSERT_TRUE(get.has_value());
    ASSERT_EQ(get->first.opcode, Opcode::kGet);
    const std::vector<std::byte> ok{std::byte{0}};
    c.Send(memd::Frame(Opcode::kGetStatus, get->first.request_id, ok, 0));
    c.Drain(1);  // until the client hangs up
  });
  auto client = Connect(server, 2000);
  ASSERT_NE(client, nullptr);
  std::vector<std::byte> dst(4096);
  ItemResults get(1);
  client->Get(0, kNs, {dst}, {BlockKey{6, 6}}, get.Done());
  ASSERT_TRUE(get.WaitFor(std::chrono::seconds(5)));
  EXPECT_EQ(get.status(0).code(), StatusCode::kIOError) << get.status(0).ToString();
  EXPECT_NE(get.status(0).message().find("bad reply: GET_STATUS with status code ok"),
            std::string::npos)
      << get.status(0).ToString();
  client->Shutdown();
}

// An ERROR frame closes the connection and fails everything pending with
// its code; with the code OK it would mark every pending PUT as landed and
// every EXISTS as present. It is a protocol violation instead: IOError.
TEST(RemoteClientAbuseTest, ErrorFrameWithCodeOkFailsWhatIsPending) {
  ScriptedMemd server([&](ScriptedConn& c) {
    if (!c.Welcome(kSecret, 1 << 20)) return;
    auto exists = c.ReadFrame();
    ASSERT_TRUE(exists.has_value());
    ASSERT_EQ(exists->first.opcode, Opcode::kExists);
    const memd::ErrorReply e{StatusCode::kOk, "all is well"};
    c.Send(memd::Frame(Opcode::kError, 0, memd::EncodeBody(e)));
    c.Drain(1);  // until the client hangs up
  });
  auto client = Connect(server, 2000);
  ASSERT_NE(client, nullptr);
  ItemResults exists(2);
  client->Exists(0, kNs, {BlockKey{7, 7}, BlockKey{8, 8}}, exists.Done());
  ASSERT_TRUE(exists.WaitFor(std::chrono::seconds(5)));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(exists.status(i).code(), StatusCode::kIOError) << exists.status(i).ToString();
    EXPECT_NE(exists.status(i).message().find("bad reply: ERROR frame with status code ok"),
              std::string::npos)
        << exists.status(i).ToString();
  }
  client->Shutdown();
}

// Two requests the server never answers, the second sent 150 ms after the
// first: when the first times out the connection is dropped, and the second
// used to fail with the first's "no reply within 300 ms" although its own
// time was not up. It now says the connection was dropped, and why.
TEST(RemoteClientAbuseTest, ARequestFailedByAnEarlierOnesTimeoutSaysSo) {
  constexpr uint32_t kTimeoutMs = 300;
  ScriptedMemd server([&](ScriptedConn& c) {
    if (!c.Welcome(kSecret, 1 << 20)) return;
    for (auto f = c.ReadFrame(); f.has_value(); f = c.ReadFrame()) {
    }
  });
  auto client = Connect(server, kTimeoutMs);
  ASSERT_NE(client, nullptr);
  ItemResults first(1), second(1);
  client->Exists(0, kNs, {BlockKey{5, 5}}, first.Done());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  client->Exists(0, kNs, {BlockKey{6, 6}}, second.Done());
  ASSERT_TRUE(first.WaitFor(std::chrono::seconds(5)));
  ASSERT_TRUE(second.WaitFor(std::chrono::seconds(5)));
  EXPECT_EQ(first.status(0).code(), StatusCode::kDeadlineExceeded) << first.status(0).ToString();
  EXPECT_NE(first.status(0).message().find("no reply within 300 ms"), std::string::npos)
      << first.status(0).ToString();
  EXPECT_EQ(second.status(0).code(), StatusCode::kUnavailable) << second.status(0).ToString();
  EXPECT_NE(second.status(0).message().find(
                "connection dropped: an earlier request on it got no reply within 300 ms"),
            std::string::npos)
      << second.status(0).ToString();
  client->Shutdown();
  server.Join();
}

// Request ids are 32 bits and wrap. A request sent just before the wrap and
// never answered must fail with DeadlineExceeded within its deadline plus a
// tick, however many newer requests (with smaller ids after the wrap) are
// pending beside it. The server keeps one newer request pending at all
// times: each is answered when the next arrives. Before, the deadline check
// looked at the smallest id only, so the stuck request never timed out.
TEST(RemoteClientAbuseTest, ARequestSentJustBeforeTheIdsWrapStillTimesOut) {
  constexpr uint32_t kTimeoutMs = 300;
  std::mutex mu;
  std::vector<uint32_t> ids;  // guarded by mu
  ScriptedMemd server([&](ScriptedConn& c) {
    if (!c.Welcome(kSecret, 1 << 20)) return;
    std::optional<uint32_t> held;
    for (auto f = c.ReadFrame(); f.has_value(); f = c.ReadFrame()) {
      if (f->first.opcode != Opcode::kExists) continue;
      bool first = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        first = ids.empty();
        ids.push_back(f->first.request_id);
      }
      if (first) continue;  // never answered
      const memd::StatusList found{{StatusCode::kOk}};
      if (held) c.Send(memd::Frame(Opcode::kStatusReply, *held, memd::EncodeBody(found)));
      held = f->first.request_id;
    }
  });
  auto client = Connect(server, kTimeoutMs);
  ASSERT_NE(client, nullptr);
  static_cast<memd::ClientImpl&>(*client).TEST_StartRequestIdsAt(0xFFFFFFFFu);

  ItemResults stuck(1);
  const auto start = Clock::now();
  client->Exists(0, kNs, {BlockKey{3, 3}}, stuck.Done());
  while (!stuck.WaitFor(std::chrono::milliseconds(20)) &&
         Clock::now() - start < std::chrono::seconds(3)) {
    ItemResults newer(1);
    client->Exists(0, kNs, {BlockKey{4, 4}}, newer.Done());
  }
  ASSERT_TRUE(stuck.WaitFor(std::chrono::milliseconds(0))) << "the stuck request never timed out";
  EXPECT_EQ(stuck.status(0).code(), StatusCode::kDeadlineExceeded) << stuck.status(0).ToString();
  EXPECT_NE(stuck.status(0).message().find("no reply within 300 ms"), std::string::npos)
      << stuck.status(0).ToString();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(stuck.finished() - start).count();
  EXPECT_GE(ms, kTimeoutMs);
  // Well before the 3 s a request id wrap would take, with room for a
  // sanitizer build on a loaded host.
  EXPECT_LE(ms, 2 * kTimeoutMs + 500) << "deadline plus a 10 ms tick, with slack for a busy host";
  client->Shutdown();
  server.Join();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 0xFFFFFFFFu);
  EXPECT_EQ(ids[1], 1u) << "0 is skipped when the ids wrap";
  EXPECT_EQ(ids[2], 2u);
}

}  // namespace
}  // namespace kvtier::testing
