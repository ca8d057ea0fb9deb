// The remote client against a scripted server that holds the shared secret
// but hands back block data that is wrong: over TCP a GET_DATA frame cut
// short, cut off mid-body, with a flipped payload or header byte, for an item
// outside the batch or for one already answered; over RDMA (on the stand-in
// device) a leased slot holding such bytes. A stored block carries its own
// checksums (kvtier/block_header.h), so the client refuses a damaged one as
// Corruption for that item alone and never reports it as data; a frame that
// breaks the protocol closes the connection and fails only what was still
// unanswered. Every item is answered exactly once, and an answered item's
// buffer is never written again.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/remote/fake_rdma_device.h"
#include "tests/remote/scripted_memd.h"
#include "tests/support/block_data.h"
#include "tests/support/time_scale.h"
#include "tiers/remote/rdma_protocol.h"

namespace kvtier::testing {
namespace {

using memd::Opcode;
using Clock = std::chrono::steady_clock;

constexpr NamespaceId kNs{21};
constexpr char kSecret[] = "data-fault-secret";
constexpr size_t kPayloadBytes = 4000;
constexpr uint64_t kSlotBytes = 64 << 10;
constexpr auto kWait = std::chrono::seconds(5);
// Byte offsets in a stored block (kvtier/block_header.h).
constexpr size_t kKeyHiOffset = 16;
constexpr size_t kPayloadBytesOffset = 32;

BlockKey Key(size_t i) { return TestKey(i); }
std::vector<std::byte> Payload(size_t i) { return BlockBytes(Key(i), kPayloadBytes); }

std::vector<std::byte> StoredBlock(size_t i) { return EncodeStoredBlock(kNs, Key(i), Payload(i)); }

std::vector<std::byte> Flipped(std::vector<std::byte> b, size_t at) {
  b[at] ^= std::byte{0x01};
  return b;
}

bool AllZero(const std::vector<std::byte>& v) {
  return std::all_of(v.begin(), v.end(), [](std::byte b) { return b == std::byte{0}; });
}

using Answers = ItemResults;

// Item `i` of `a` was answered once with `code` and a message holding `text`.
void ExpectFailed(const Answers& a, size_t i, StatusCode code, const std::string& text) {
  const Answers::Item item = a.item(i);
  EXPECT_EQ(item.calls, 1) << "item " << i;
  EXPECT_EQ(item.status.code(), code) << "item " << i << ": " << item.status.ToString();
  EXPECT_NE(item.status.message().find(text), std::string::npos)
      << "item " << i << ": " << item.status.ToString();
  EXPECT_EQ(item.bytes, 0u) << "item " << i;
}

// Item `i` of `a` was answered once as a hit, and `dst` holds Payload(i).
void ExpectHit(const Answers& a, size_t i, const std::vector<std::byte>& dst) {
  const Answers::Item item = a.item(i);
  EXPECT_EQ(item.calls, 1) << "item " << i;
  EXPECT_TRUE(item.status.ok()) << "item " << i << ": " << item.status.ToString();
  EXPECT_EQ(item.bytes, kPayloadBytes) << "item " << i;
  EXPECT_TRUE(dst == Payload(i)) << "item " << i << ": wrong bytes";
}

// The server's side up to the GET of the test: the handshake, then the GET
// frame. Its request id, or nullopt (with a test failure).
std::optional<uint32_t> ReadGet(ScriptedConn& c, size_t items) {
  if (!c.Welcome(kSecret, kSlotBytes)) return std::nullopt;
  auto get = c.ReadFrame();
  if (!get || get->first.opcode != Opcode::kGet) {
    ADD_FAILURE() << "scripted memd: no GET";
    return std::nullopt;
  }
  auto keys = memd::DecodeKeyBatch(get->second);
  EXPECT_TRUE(keys.ok() && keys->keys.size() == items) << "scripted memd: not the test's GET";
  return get->first.request_id;
}

std::vector<std::byte> GetData(uint32_t id, size_t item, std::span<const std::byte> body) {
  return memd::Frame(Opcode::kGetData, id, body, static_cast<uint16_t>(item));
}

// Answers the EXISTS that follows a GET with "found": proof that the client
// kept the connection, in step with the server, after the GET's replies.
void AnswerExists(ScriptedConn& c) {
  auto exists = c.ReadFrame();
  if (!exists || exists->first.opcode != Opcode::kExists) return;
  const memd::StatusList found{{StatusCode::kOk}};
  c.Send(memd::Frame(Opcode::kStatusReply, exists->first.request_id, memd::EncodeBody(found)));
}

class RemoteClientDataFaultTest : public ::testing::Test {
 protected:
  void Connect(const ScriptedMemd& server, uint32_t op_timeout_ms = 2000) {
    auto c = memd::RemoteClient::Create(ScriptedClientOptions(server, kSecret, op_timeout_ms),
                                        StderrLogSink(LogLevel::kError), nullptr);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    server_.reset();
  }
  // What the scripted server does once it has sent a GET's frames.
  enum class Then {
    kKeepLink,      // answers the client's EXISTS (ExpectLinkKept), then waits for it to hang up
    kExpectClosed,  // expects the client to close the connection within 2 s
  };
  // A server that reads a GET of `n` items and sends what `send` makes of
  // it (given the request id), then does `then`; connected to, GETs n
  // items (Get) and waits for every answer. Replaces any earlier server and
  // client.
  Answers ServeGet(size_t n, std::function<void(ScriptedConn&, uint32_t id)> send, Then then) {
    if (client_) client_->Shutdown();
    server_ = std::make_unique<ScriptedMemd>([n, send = std::move(send), then](ScriptedConn& c) {
      auto id = ReadGet(c, n);
      if (!id) return;
      send(c, *id);
      if (then == Then::kKeepLink) {
        AnswerExists(c);
        c.Drain(1);  // until the client hangs up
      } else {
        EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(2)));
      }
    });
    Connect(*server_);
    if (HasFatalFailure()) return Answers(n);
    Answers get = Get(n);
    // A fatal failure for the caller's ASSERT_FALSE(HasFatalFailure()).
    if (!get.WaitFor(kWait)) [] { FAIL() << "the GET was not answered in time"; }();
    return get;
  }
  // GETs Key(0..n-1) into zeroed buffers of kPayloadBytes (dsts_).
  Answers Get(size_t n) {
    dsts_.assign(n, std::vector<std::byte>(kPayloadBytes));
    std::vector<std::span<std::byte>> dsts;
    std::vector<BlockKey> keys;
    for (size_t i = 0; i < n; ++i) {
      dsts.emplace_back(dsts_[i]);
      keys.push_back(Key(i));
    }
    Answers a(n);
    client_->Get(0, kNs, std::move(dsts), std::move(keys), a.Done());
    return a;
  }
  // An EXISTS on the same connection is answered (AnswerExists): the link
  // survived the GET.
  void ExpectLinkKept() {
    ItemResults exists(1);
    client_->Exists(0, kNs, {Key(0)}, exists.Done());
    ASSERT_TRUE(exists.WaitFor(kWait));
    EXPECT_TRUE(exists.status(0).ok()) << exists.status(0).ToString();
  }

  std::vector<std::vector<std::byte>> dsts_;
  std::unique_ptr<ScriptedMemd> server_;  // ServeGet's
  std::unique_ptr<memd::RemoteClient> client_;
};

// A frame whose body is 100 bytes shorter than the block its header
// describes: the item fails as Corruption, and since the frame's own length
// was honest the stream stays in step: the items around it are hits and
// the connection goes on.
TEST_F(RemoteClientDataFaultTest, ABlockShorterThanItsHeaderSaysIsCorruptionForItAlone) {
  Answers get = ServeGet(
      3,
      [](ScriptedConn& c, uint32_t id) {
        const std::vector<std::byte> cut = StoredBlock(1);
        c.Send(GetData(id, 0, StoredBlock(0)));
        c.Send(GetData(id, 1, std::span(cut).first(cut.size() - 100)));
        c.Send(GetData(id, 2, StoredBlock(2)));
      },
      Then::kKeepLink);
  ASSERT_FALSE(HasFatalFailure());
  ExpectHit(get, 0, dsts_[0]);
  ExpectFailed(get, 1, StatusCode::kCorruption,
               "stored block: block payload: length 3900 != header's 4000");
  ExpectHit(get, 2, dsts_[2]);
  ExpectLinkKept();
}

// The server hangs up halfway through a block's body: that item and the one
// never sent fail with Unavailable at once (not at the 2 s deadline), the
// item answered before keeps its hit, and nothing is answered twice.
TEST_F(RemoteClientDataFaultTest, AConnectionClosedMidBlockFailsWhatIsLeftAtOnce) {
  auto server = std::make_unique<ScriptedMemd>([&](ScriptedConn& c) {
    auto id = ReadGet(c, 3);
    if (!id) return;
    const std::vector<std::byte> whole = GetData(*id, 1, StoredBlock(1));
    c.Send(GetData(*id, 0, StoredBlock(0)));
    c.Send(std::span(whole).first(whole.size() / 2));
  });
  ASSERT_NO_FATAL_FAILURE(Connect(*server));
  Answers get = Get(3);
  server->Join();  // everything is sent; the client waits for the rest of item 1
  EXPECT_FALSE(get.WaitFor(std::chrono::milliseconds(50)));
  const auto closed = Clock::now();
  server.reset();  // shuts the connection down
  ASSERT_TRUE(get.WaitFor(kWait));
  ExpectHit(get, 0, dsts_[0]);
  for (size_t i : {1, 2}) ExpectFailed(get, i, StatusCode::kUnavailable, "read block");
  EXPECT_TRUE(AllZero(dsts_[2]));
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(get.finished() - closed).count();
  EXPECT_LT(ms, Scaled(std::chrono::milliseconds(1000)).count())
      << "the items failed at the deadline, not when the connection closed";
  EXPECT_EQ(get.out_of_range(), 0);
}

// A server that stops halfway through a block's body and keeps the
// connection open: the unanswered items fail with DeadlineExceeded at the
// request's deadline, and the answered one keeps its hit.
TEST_F(RemoteClientDataFaultTest, ABlockThatStallsMidBodyFailsAtTheDeadline) {
  constexpr uint32_t kTimeoutMs = 300;
  ScriptedMemd server([&](ScriptedConn& c) {
    auto id = ReadGet(c, 3);
    if (!id) return;
    const std::vector<std::byte> whole = GetData(*id, 1, StoredBlock(1));
    c.Send(GetData(*id, 0, StoredBlock(0)));
    c.Send(std::span(whole).first(memd::kFrameHeaderBytes + kBlockHeaderBytes + 10));
    c.Drain(1);  // until the client hangs up
  });
  ASSERT_NO_FATAL_FAILURE(Connect(server, kTimeoutMs));
  const auto start = Clock::now();
  Answers get = Get(3);
  ASSERT_TRUE(get.WaitFor(kWait));
  ExpectHit(get, 0, dsts_[0]);
  for (size_t i : {1, 2}) {
    ExpectFailed(get, i, StatusCode::kDeadlineExceeded, "no reply within 300 ms");
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(get.finished() - start).count();
  EXPECT_GE(ms, kTimeoutMs);
  EXPECT_LE(ms, Scaled(std::chrono::milliseconds(2 * kTimeoutMs + 500)).count())
      << "deadline plus a 10 ms tick, with slack for a busy host";
}

// A block frame too short to hold even a block header breaks the protocol
// (the server never sends one): the connection closes, the unanswered items
// fail with IOError naming it, the answered one keeps its hit.
TEST_F(RemoteClientDataFaultTest, ABlockFrameShorterThanABlockHeaderClosesTheLink) {
  Answers get = ServeGet(
      3,
      [](ScriptedConn& c, uint32_t id) {
        const std::vector<std::byte> cut = StoredBlock(1);
        c.Send(GetData(id, 0, StoredBlock(0)));
        c.Send(GetData(id, 1, std::span(cut).first(40)));
        c.Send(GetData(id, 2, StoredBlock(2)));
      },
      Then::kExpectClosed);
  ASSERT_FALSE(HasFatalFailure());
  ExpectHit(get, 0, dsts_[0]);
  for (size_t i : {1, 2}) {
    ExpectFailed(get, i, StatusCode::kIOError,
                 "bad reply: block frame of 40 bytes holds no payload");
    EXPECT_TRUE(AllZero(dsts_[i])) << "item " << i;
  }
}

// One payload byte flipped, in the middle and at the end: the payload
// checksum no longer matches, so each such item is Corruption, never a hit.
TEST_F(RemoteClientDataFaultTest, AFlippedPayloadByteIsCorruptionNeverData) {
  Answers get = ServeGet(
      4,
      [](ScriptedConn& c, uint32_t id) {
        c.Send(GetData(id, 0, StoredBlock(0)));
        c.Send(GetData(id, 1, Flipped(StoredBlock(1), kBlockHeaderBytes + kPayloadBytes / 2)));
        c.Send(GetData(id, 2, Flipped(StoredBlock(2), kBlockHeaderBytes + kPayloadBytes - 1)));
        c.Send(GetData(id, 3, StoredBlock(3)));
      },
      Then::kKeepLink);
  ASSERT_FALSE(HasFatalFailure());
  ExpectHit(get, 0, dsts_[0]);
  for (size_t i : {1, 2}) {
    ExpectFailed(get, i, StatusCode::kCorruption,
                 "stored block: block payload: checksum mismatch for key " + ToHex(Key(i)));
  }
  ExpectHit(get, 3, dsts_[3]);
  ExpectLinkKept();
}

// Header damage: a flipped key byte or payload length byte breaks the
// header checksum; a whole, self-consistent header for another key or
// another namespace is the wrong block. Each is Corruption for its item.
TEST_F(RemoteClientDataFaultTest, AFlippedHeaderByteIsCorruptionNeverData) {
  Answers get = ServeGet(
      5,
      [](ScriptedConn& c, uint32_t id) {
        c.Send(GetData(id, 0, Flipped(StoredBlock(0), kKeyHiOffset)));
        c.Send(GetData(id, 1, Flipped(StoredBlock(1), kPayloadBytesOffset)));
        c.Send(GetData(id, 2, EncodeStoredBlock(kNs, Key(7), Payload(2))));
        c.Send(GetData(id, 3, EncodeStoredBlock(NamespaceId{kNs.value + 1}, Key(3), Payload(3))));
        c.Send(GetData(id, 4, StoredBlock(4)));
      },
      Then::kKeepLink);
  ASSERT_FALSE(HasFatalFailure());
  for (size_t i : {0, 1}) {
    ExpectFailed(get, i, StatusCode::kCorruption,
                 "stored block: block header: header checksum mismatch");
  }
  ExpectFailed(get, 2, StatusCode::kCorruption,
               "block header: key " + ToHex(Key(7)) + " != expected " + ToHex(Key(2)));
  ExpectFailed(get, 3, StatusCode::kCorruption, "block header: namespace");
  ExpectHit(get, 4, dsts_[4]);
  ExpectLinkKept();
}

// GET_DATA for item 2 of a two-item GET (and for item 65535) answers
// nothing the client asked for: the connection closes before its body is
// read anywhere, the unanswered item fails with IOError, the answered one
// keeps its hit, and no index outside the batch reaches the caller.
TEST_F(RemoteClientDataFaultTest, AGetDataForAnItemOutsideTheBatchClosesTheLink) {
  for (const size_t stray : {size_t{2}, size_t{0xFFFF}}) {
    SCOPED_TRACE("item " + std::to_string(stray));
    Answers get = ServeGet(
        2,
        [stray](ScriptedConn& c, uint32_t id) {
          c.Send(GetData(id, 0, StoredBlock(0)));
          c.Send(GetData(id, stray, StoredBlock(1)));
          c.Send(GetData(id, 1, StoredBlock(1)));
        },
        Then::kExpectClosed);
    ASSERT_FALSE(HasFatalFailure());
    ExpectHit(get, 0, dsts_[0]);
    ExpectFailed(get, 1, StatusCode::kIOError, "bad reply: GET_DATA for no pending item");
    EXPECT_TRUE(AllZero(dsts_[1]));
    EXPECT_EQ(get.out_of_range(), 0);
    client_->Shutdown();
  }
}

// A second GET_DATA for an item already answered (here with another valid
// block of the same key): the first answer stands, its buffer, which the
// caller owns again, is not written, and the connection closes.
TEST_F(RemoteClientDataFaultTest, AGetDataForAnItemTwiceKeepsTheFirstAnswerAndItsBuffer) {
  Answers get = ServeGet(
      2,
      [](ScriptedConn& c, uint32_t id) {
        c.Send(GetData(id, 0, StoredBlock(0)));
        c.Send(
            GetData(id, 0, EncodeStoredBlock(kNs, Key(0), BlockBytes(Key(0), kPayloadBytes, 1))));
        c.Send(GetData(id, 1, StoredBlock(1)));
      },
      Then::kExpectClosed);
  ASSERT_FALSE(HasFatalFailure());
  ExpectHit(get, 0, dsts_[0]);
  ExpectFailed(get, 1, StatusCode::kIOError, "bad reply: GET_DATA for no pending item");
  EXPECT_TRUE(AllZero(dsts_[1]));
}

// transport: rdma on the stand-in device. The scripted server's pool holds
// one block per slot; LEASE_REPLY leases them and the client READs them.
constexpr size_t kRdmaSlot = 8 << 10;
constexpr size_t kRdmaBlocks = 4;
constexpr uint64_t kStoredBytes = kBlockHeaderBytes + kPayloadBytes;

class RdmaDataFaultTest : public ::testing::Test {
 protected:
  // Slot i holds StoredBlock(i), damaged: 1 a flipped payload byte, 2 a
  // flipped key byte, 3 whole but leased 100 bytes short.
  RdmaDataFaultTest() : pool_(kRdmaBlocks * kRdmaSlot), pool_mem_(fabric_, pool_) {
    const std::vector<std::vector<std::byte>> blocks = {
        StoredBlock(0), Flipped(StoredBlock(1), kBlockHeaderBytes + 7),
        Flipped(StoredBlock(2), kKeyHiOffset), StoredBlock(3)};
    for (size_t i = 0; i < kRdmaBlocks; ++i) {
      std::copy(blocks[i].begin(), blocks[i].end(), pool_.begin() + i * kRdmaSlot);
    }
  }
  memd::LeaseReply Lease(uint64_t id) const {
    memd::LeaseReply l{id, {}};
    const memd::RdmaRegion r = pool_mem_.region();
    for (size_t i = 0; i < kRdmaBlocks; ++i) {
      l.items.push_back({StatusCode::kOk, r.addr + i * kRdmaSlot, r.rkey,
                         i == 3 ? kStoredBytes - 100 : kStoredBytes});
    }
    return l;
  }
  // The handshake, RDMA_HELLO -> RDMA_READY, then every GET_LEASE leased.
  void Serve(ScriptedConn& c) {
    if (!c.Welcome(kSecret, kSlotBytes)) return;
    auto hello = c.ReadFrame();
    ASSERT_TRUE(hello && hello->first.opcode == Opcode::kRdmaHello);
    const memd::RdmaReady ready{{0x77, 0, {}, 1}, pool_mem_.region(), 1000};
    c.Send(memd::Frame(Opcode::kRdmaReady, 0, memd::EncodeBody(ready)));
    uint64_t lease = 0;
    for (auto f = c.ReadFrame(); f.has_value(); f = c.ReadFrame()) {
      if (f->first.opcode != Opcode::kGetLease) continue;
      c.Send(
          memd::Frame(Opcode::kLeaseReply, f->first.request_id, memd::EncodeBody(Lease(++lease))));
    }
  }
  // GETs Key(0..3) into `dsts` and checks each item's answer.
  void GetAndCheck(memd::RemoteClient& client, std::vector<std::span<std::byte>> dsts) {
    Answers get(kRdmaBlocks);
    std::vector<BlockKey> keys;
    for (size_t i = 0; i < kRdmaBlocks; ++i) keys.push_back(Key(i));
    client.Get(0, kNs, dsts, std::move(keys), get.Done());
    ASSERT_TRUE(get.WaitFor(kWait));
    ExpectHit(get, 0, std::vector<std::byte>(dsts[0].begin(), dsts[0].end()));
    ExpectFailed(get, 1, StatusCode::kCorruption,
                 "stored block: block payload: checksum mismatch for key " + ToHex(Key(1)));
    ExpectFailed(get, 2, StatusCode::kCorruption,
                 "stored block: block header: header checksum mismatch");
    ExpectFailed(get, 3, StatusCode::kCorruption,
                 "stored block: block payload: length 3900 != header's 4000");
  }

  FakeRdmaFabric fabric_;  // first: outlives the client
  std::vector<std::byte> pool_;
  FakeRdmaMemory pool_mem_;
};

// Damaged blocks read through their slots are Corruption, whether the bytes
// come through staging buffers or land in place in registered host memory
// (where the damaged bytes are already in the caller's buffer: the status
// alone keeps them from being used).
TEST_F(RdmaDataFaultTest, DamagedBlocksReadThroughASlotAreCorruptionNeverData) {
  ScriptedMemd server([&](ScriptedConn& c) { Serve(c); });
  memd::RemoteClientOptions o = ScriptedClientOptions(server, kSecret, 2000);
  o.transport = "rdma";
  o.rdma_device = fabric_.Factory();
  auto client = memd::RemoteClient::Create(o, StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  std::vector<std::vector<std::byte>> staged(kRdmaBlocks, std::vector<std::byte>(kPayloadBytes));
  {
    SCOPED_TRACE("staged");
    GetAndCheck(**client, {staged[0], staged[1], staged[2], staged[3]});
  }
  std::vector<std::byte> arena(kRdmaBlocks * kPayloadBytes);
  ASSERT_EQ((*client)->RegisterHostMemory(arena), arena.size());
  std::vector<std::span<std::byte>> in_place;
  for (size_t i = 0; i < kRdmaBlocks; ++i) {
    in_place.push_back(std::span(arena).subspan(i * kPayloadBytes, kPayloadBytes));
  }
  {
    SCOPED_TRACE("in place");
    GetAndCheck(**client, in_place);
  }
  EXPECT_EQ(fabric_.reads(), static_cast<int>(2 * kRdmaBlocks));
  EXPECT_EQ(fabric_.pieces_with_key(fabric_.KeyOf(arena.data())), static_cast<int>(kRdmaBlocks))
      << "the second GET's payloads did not land in place";
  (*client)->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
