// The remote client (transport: tcp) against an in-process kvtier-memd whose
// slots are smaller than a block it is asked to store: the server's slot
// size may shrink after the tier opened (a restart with another
// --slot-size), so the client checks each PUT against the slot size of the
// connection it goes out on. A block that does not fit fails alone; the
// connection, and every other request on it, goes on. The server, too, drops
// the data of such a block from a client that sends it anyway.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "tests/remote/memd_test_options.h"
#include "tests/remote/raw_memd_client.h"
#include "tests/remote/scripted_memd.h"
#include "tests/support/recording_log.h"
#include "tiers/remote/memd_server.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{17};
constexpr char kSecret[] = "slot-size-secret";
constexpr auto kWait = std::chrono::seconds(5);

// An in-process server with small slots, its warnings kept (a protocol
// error is one), and a client with one TCP connection to it.
class RemoteClientSlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    memd::MemdServerOptions so = SmallMemdOptions(kSecret, "tcp");
    so.log = log_;
    slot_ = so.pool.slot_bytes;
    auto server = memd::MemdServer::Start(so);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    auto client = memd::RemoteClient::Create(OneConnectionTo(server_->port(), kSecret, 3000),
                                             client_log_, nullptr);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    if (server_) server_->Stop();
  }

  std::shared_ptr<RecordingLog> log_ = std::make_shared<RecordingLog>(LogLevel::kWarning);
  std::shared_ptr<RecordingLog> client_log_ = std::make_shared<RecordingLog>(LogLevel::kWarning);
  uint64_t slot_ = 0;
  std::unique_ptr<memd::MemdServer> server_;
  std::unique_ptr<memd::RemoteClient> client_;
};

// A block twice the server's slot, put between two GETs pipelined on the one
// connection: the PUT fails with InvalidArgument naming the slot size, both
// GETs return the stored block, and the server sees no protocol error.
// Before, the client sent the oversized PUT_DATA; the server answered with
// ERROR and closed the connection, failing the PUT and the GETs queued
// behind it with InvalidArgument.
TEST_F(RemoteClientSlotTest, APutLargerThanTheSlotFailsAloneOverTcp) {
  const uint64_t slot = slot_;
  memd::RemoteClient& c = *client_;

  const BlockKey a{1, 1};
  const std::vector<std::byte> small(4096, std::byte{0x5a});
  ItemResults put_a(1);
  c.Put(0, kNs, {{a, small, std::nullopt}}, put_a.Done());
  ASSERT_TRUE(put_a.WaitFor(kWait));
  ASSERT_TRUE(put_a.status(0).ok()) << put_a.status(0).ToString();

  const std::vector<std::byte> big(2 * slot, std::byte{0x33});
  std::vector<std::byte> first(small.size()), second(small.size());
  ItemResults get1(1), put_big(2), get2(1);
  c.Get(0, kNs, {first}, {a}, get1.Done());
  // Two items in one request: the one that fits still goes out.
  c.Put(0, kNs, {{BlockKey{2, 2}, big, std::nullopt}, {BlockKey{3, 3}, small, std::nullopt}},
        put_big.Done());
  c.Get(0, kNs, {second}, {a}, get2.Done());
  ASSERT_TRUE(get1.WaitFor(kWait));
  ASSERT_TRUE(put_big.WaitFor(kWait));
  ASSERT_TRUE(get2.WaitFor(kWait));

  const Status refused = put_big.status(0);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("exceeds the server's slot of " + std::to_string(slot)),
            std::string::npos)
      << refused.ToString();
  EXPECT_TRUE(put_big.status(1).ok()) << put_big.status(1).ToString();
  EXPECT_TRUE(get1.status(0).ok()) << get1.status(0).ToString();
  EXPECT_TRUE(get2.status(0).ok()) << get2.status(0).ToString();
  EXPECT_EQ(first, small);
  EXPECT_EQ(second, small);

  // The item that fit is stored; the one that did not never reached the pool.
  std::vector<std::byte> third(small.size());
  ItemResults get3(2);
  std::vector<std::byte> none(big.size());
  c.Get(0, kNs, {third, none}, {BlockKey{3, 3}, BlockKey{2, 2}}, get3.Done());
  ASSERT_TRUE(get3.WaitFor(kWait));
  EXPECT_TRUE(get3.status(0).ok()) << get3.status(0).ToString();
  EXPECT_EQ(third, small);
  EXPECT_EQ(get3.status(1).code(), StatusCode::kNotFound) << get3.status(1).ToString();

  EXPECT_EQ(server_->TEST_Connections(), 1u);
  EXPECT_TRUE(log_->lines().empty()) << "server warned: " << log_->lines().front();
}

// A PUT whose every item is too large fails at once and sends nothing.
TEST_F(RemoteClientSlotTest, APutOfOnlyOversizedBlocksSendsNothing) {
  const uint64_t slot = slot_;
  memd::RemoteClient& c = *client_;

  // Exactly one byte over: the slot holds the block header too.
  const std::vector<std::byte> over(slot - kBlockHeaderBytes + 1, std::byte{1});
  ItemResults put(2);
  c.Put(0, kNs, {{BlockKey{4, 4}, over, std::nullopt}, {BlockKey{5, 5}, over, std::nullopt}},
        put.Done());
  ASSERT_TRUE(put.WaitFor(kWait));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(put.status(i).code(), StatusCode::kInvalidArgument) << put.status(i).ToString();
  }
  ItemResults exists(1);
  c.Exists(0, kNs, {BlockKey{4, 4}}, exists.Done());
  ASSERT_TRUE(exists.WaitFor(kWait));
  EXPECT_EQ(exists.status(0).code(), StatusCode::kNotFound) << exists.status(0).ToString();
  EXPECT_EQ(server_->GetStats().used_slots, 0u);
  EXPECT_EQ(server_->TEST_Connections(), 1u);
  EXPECT_TRUE(log_->lines().empty()) << "server warned: " << log_->lines().front();

  // The operator is told once which server refuses and what it needs: the
  // tier checked the slots at open, so the server restarted smaller.
  ItemResults again(1);
  c.Put(0, kNs, {{BlockKey{6, 6}, over, std::nullopt}}, again.Done());
  ASSERT_TRUE(again.WaitFor(kWait));
  EXPECT_EQ(again.status(0).code(), StatusCode::kInvalidArgument);
  const std::string endpoint = "127.0.0.1:" + std::to_string(server_->port());
  EXPECT_EQ(
      client_log_->lines(),
      std::vector<std::string>{"remote server " + endpoint + ": block of " +
                               std::to_string(over.size()) + " bytes (" + std::to_string(slot + 1) +
                               " with its header) exceeds the server's "
                               "slot of " +
                               std::to_string(slot) +
                               " bytes; restart it with --slot-size of at "
                               "least " +
                               std::to_string(slot + 1) + " bytes"});
}

// Sends `b` whole; false when the server has closed the connection (no
// SIGPIPE: that would end the whole test binary).
bool SendAll(RawClient& c, std::span<const std::byte> b) {
  while (!b.empty()) {
    const ssize_t n = send(c.fd(), b.data(), b.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    b = b.subspan(static_cast<size_t>(n));
  }
  return true;
}

// PUT_DATA with its PUT_DATA frame: the block header, then the payload.
std::vector<std::byte> PutData(uint32_t id, uint16_t item, const BlockKey& key,
                               const std::vector<std::byte>& payload) {
  std::vector<std::byte> body(kBlockHeaderBytes + payload.size());
  EncodeBlockHeader(MakeBlockHeader(kNs, key, payload), std::span(body).first(kBlockHeaderBytes));
  std::copy(payload.begin(), payload.end(), body.begin() + kBlockHeaderBytes);
  return memd::Frame(memd::Opcode::kPutData, id, body, item);
}

// A client that sends the data of a block too large for a slot anyway (one
// that checks no slot size) loses that item only: the server refused it at
// PUT_BEGIN, drops its PUT_DATA, stores the other item and keeps the
// connection. Before, the PUT_DATA frame was a protocol error: ERROR and a
// close.
TEST(MemdSlotTest, TheServerDropsTheDataOfAnItemTooLargeForASlot) {
  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning);
  memd::MemdServerOptions so = SmallMemdOptions(kSecret, "tcp");
  so.log = log;
  const uint64_t slot = so.pool.slot_bytes;
  auto server = memd::MemdServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RawClient c((*server)->port());
  ASSERT_TRUE(c.connected());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));

  const std::vector<std::byte> big(2 * slot, std::byte{0x33}), small(1000, std::byte{0x44});
  const BlockKey big_key{6, 6}, small_key{7, 7};
  const memd::PutBegin begin{kNs, {{big_key, big.size()}, {small_key, small.size()}}};
  ASSERT_TRUE(SendAll(c, memd::Frame(memd::Opcode::kPutBegin, 5, memd::EncodeBody(begin))));
  const bool sent = SendAll(c, PutData(5, 0, big_key, big)) &&
                    SendAll(c, PutData(5, 1, small_key, small)) &&
                    SendAll(c, memd::Frame(memd::Opcode::kPutCommit, 5, {}));
  EXPECT_TRUE(sent) << "the server closed the connection";
  const std::vector<StatusCode> expected{StatusCode::kInvalidArgument, StatusCode::kOk};
  for (memd::Opcode op : {memd::Opcode::kBeginReply, memd::Opcode::kStatusReply}) {
    auto f = c.ReadFrame();
    ASSERT_TRUE(f.has_value()) << "connection closed";
    ASSERT_EQ(f->first.opcode, op);
    auto codes = memd::DecodeStatusList(f->second);
    ASSERT_TRUE(codes.ok()) << codes.status().ToString();
    EXPECT_EQ(codes->codes, expected);
  }
  const memd::KeyBatch exists{kNs, {small_key, big_key}};
  ASSERT_TRUE(SendAll(c, memd::Frame(memd::Opcode::kExists, 6, memd::EncodeBody(exists))));
  auto f = c.ReadFrame();
  ASSERT_TRUE(f.has_value()) << "connection closed";
  ASSERT_EQ(f->first.opcode, memd::Opcode::kStatusReply);
  auto found = memd::DecodeStatusList(f->second);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->codes, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kNotFound}));
  EXPECT_TRUE(log->lines().empty()) << "server warned: " << log->lines().front();
  (*server)->Stop();
}

}  // namespace
}  // namespace kvtier::testing
