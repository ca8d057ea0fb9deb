// kvtier-memd against peers that hold what they should not: reply frames and
// oversized handshake frames sent to the server, idle unauthenticated
// sockets, puts begun and never finished, and STATS with more namespaces
// than one reply can list.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "kvtier/block_header.h"
#include "tests/remote/memd_guard_fixture.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::testing {
namespace {

TEST_F(MemdGuardTest, AReplyOpcodeIsRefusedFromItsHeaderBeforeTheHandshake) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  RawClient c(server_->port());
  ASSERT_TRUE(c.connected());
  // A block-sized GET_DATA header and no body: refused without waiting for it.
  c.Send(memd::EncodeFrameHeader({memd::Opcode::kGetData, 0, 1, 64 << 10}));
  c.ExpectError("opcode 21 is not a request");
}

TEST_F(MemdGuardTest, AReplyOpcodeIsRefusedFromItsHeaderAfterTheHandshake) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  RawClient c(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));
  c.Send(memd::EncodeFrameHeader({memd::Opcode::kGetData, 0, 2, 64 << 10}));
  c.ExpectError("opcode 21 is not a request");
}

TEST_F(MemdGuardTest, HandshakeFramesHaveASmallBodyCap) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  RawClient c(server_->port());
  c.Send(memd::EncodeFrameHeader({memd::Opcode::kHello, 0, 1, 4096}));
  c.ExpectError("handshake frame body of 4096 bytes exceeds the limit of 64");
}

TEST_F(MemdGuardTest, IdleConnectionsCannotLockClientsOut) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) {
    o.max_connections = 4;
    o.handshake_timeout_ms = 200;
  }));
  RawClient authed(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(authed, kSecret));
  // With these the server holds its maximum; none sends a byte.
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<RawClient>(server_->port()));
  for (auto& c : idle) c->ExpectError("handshake not completed within 200 ms");
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  ASSERT_NO_FATAL_FAILURE(Put(0));
  ASSERT_NO_FATAL_FAILURE(ExpectStored(0));
  // An authenticated connection has no handshake deadline.
  authed.Send(memd::Frame(memd::Opcode::kStats, 3, {}));
  auto r = authed.ReadFrame();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first.opcode, memd::Opcode::kStatsReply);
}

// PUT_BEGIN for `n` items of 1000 bytes; returns the BEGIN_REPLY codes.
std::vector<StatusCode> BeginPut(RawClient& c, uint32_t id, uint64_t n) {
  memd::PutBegin m{NamespaceId{11}, {}};
  for (uint64_t i = 0; i < n; ++i) m.items.push_back({TestKey(100 + i), 1000});
  c.Send(memd::Frame(memd::Opcode::kPutBegin, id, memd::EncodeBody(m)));
  auto r = c.ReadFrame();
  EXPECT_TRUE(r.has_value() && r->first.opcode == memd::Opcode::kBeginReply);
  if (!r.has_value()) return {};
  auto codes = memd::DecodeStatusList(r->second);
  EXPECT_TRUE(codes.ok());
  return codes.ok() ? codes->codes : std::vector<StatusCode>{};
}

TEST_F(MemdGuardTest, AStalledPutHoldsAtMostThreeQuartersOfThePoolUntilItsDeadline) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) { o.put_timeout_ms = 300; }));
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  ASSERT_NO_FATAL_FAILURE(Put(0));
  RawClient c(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));
  // Every slot of the 16-slot pool asked for; the data never comes.
  std::vector<StatusCode> codes = BeginPut(c, 2, 16);
  ASSERT_EQ(codes.size(), 16u);
  // Three quarters of them are reserved, the rest refused.
  EXPECT_EQ(std::count(codes.begin(), codes.end(), StatusCode::kOk), 12);
  EXPECT_EQ(std::count(codes.begin(), codes.end(), StatusCode::kResourceExhausted), 4);
  // Nothing was evicted for it, and the other client still puts and gets.
  ASSERT_NO_FATAL_FAILURE(ExpectStored(0));
  for (uint64_t i = 1; i <= 2; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(i));
    ASSERT_NO_FATAL_FAILURE(ExpectStored(i));
  }
  c.ExpectError("a put made no progress for 300 ms; its reservations are cancelled");
  // The reservations went back: only the three stored blocks hold slots.
  EXPECT_TRUE(Eventually([&] { return server_->GetStats().used_slots == 3; }))
      << server_->GetStats().used_slots;
}

TEST_F(MemdGuardTest, APutDataStalledMidBlockIsCutOffAtItsDeadline) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) { o.put_timeout_ms = 300; }));
  RawClient c(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));
  ASSERT_EQ(BeginPut(c, 2, 1), std::vector<StatusCode>{StatusCode::kOk});
  // The header of the item's data and a tenth of it, then nothing.
  c.Send(memd::EncodeFrameHeader({memd::Opcode::kPutData, 0, 2, 1000 + kBlockHeaderBytes}));
  c.Send(std::vector<std::byte>(100));
  EXPECT_EQ(server_->GetStats().used_slots, 1u);
  // The slot was being read into: the connection is closed, not told.
  EXPECT_TRUE(c.SeesEof());
  EXPECT_TRUE(Eventually([&] { return server_->GetStats().used_slots == 0; }));
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  ASSERT_NO_FATAL_FAILURE(Put(0));
  ASSERT_NO_FATAL_FAILURE(ExpectStored(0));
}

// A put's reservations expire at its own deadline whatever another put of
// the connection sends: data for a put refused whole (an item every 100 ms)
// kept every put of the connection alive while the connection was the unit.
TEST_F(MemdGuardTest, DataForAnotherPutDoesNotKeepAStalledPutsReservations) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) { o.put_timeout_ms = 300; }));
  RawClient c(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));
  std::vector<StatusCode> codes = BeginPut(c, 2, 16);
  ASSERT_EQ(std::count(codes.begin(), codes.end(), StatusCode::kOk), 12);
  // Past kMaxBegunPutItems begun items, the fourth of these is refused
  // whole: its data is read and dropped however often it comes.
  for (uint32_t id = 3; id <= 6; ++id) {
    memd::PutBegin m{kNs, {}};
    for (uint64_t i = 0; i < memd::kMaxBatchItems; ++i) {
      m.items.push_back({TestKey(id * 10000 + i), 1000});
    }
    c.Send(memd::Frame(memd::Opcode::kPutBegin, id, memd::EncodeBody(m)));
    auto r = c.ReadFrame();
    ASSERT_TRUE(r.has_value() && r->first.opcode == memd::Opcode::kBeginReply);
  }
  bool released = false;
  const std::vector<std::byte> trickle =
      memd::Frame(memd::Opcode::kPutData, 6, std::vector<std::byte>(10 + kBlockHeaderBytes), 0);
  for (int i = 0; i < 20 && !released; ++i) {  // 2 s, far past the 300 ms deadline
    (void)send(c.fd(), trickle.data(), trickle.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    released = server_->GetStats().used_slots == 0;
  }
  EXPECT_TRUE(released) << "the stalled put still held " << server_->GetStats().used_slots
                        << " slots";
  c.ExpectError("a put made no progress for 300 ms; its reservations are cancelled");
}

// A large item on a slow link: its data comes in pieces over more than
// put_timeout_ms, but faster than the floor rate (4 MiB/s). The put is
// committed; it used to be cut off put_timeout_ms after its PUT_DATA header.
TEST_F(MemdGuardTest, APutDataArrivingSlowlyButSteadilyIsNotCutOff) {
  constexpr uint64_t kItem = 16 << 20;
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) {
    o.put_timeout_ms = 300;
    o.pool.slot_bytes = 17 << 20;
    o.pool.pool_bytes = 2 * o.pool.slot_bytes;
  }));
  RawClient c(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));
  const BlockKey key = TestKey(7);
  // Built first: under TSan, filling 16 MiB takes longer than the put timeout.
  const std::vector<std::byte> payload = BlockBytes(key, kItem);
  std::vector<std::byte> body(kBlockHeaderBytes + kItem);
  EncodeBlockHeader(MakeBlockHeader(kNs, key, payload), std::span(body).first(kBlockHeaderBytes));
  std::copy(payload.begin(), payload.end(), body.begin() + kBlockHeaderBytes);
  c.Send(memd::Frame(memd::Opcode::kPutBegin, 2,
                     memd::EncodeBody(memd::PutBegin{kNs, {{key, kItem}}})));
  auto begun = c.ReadFrame();
  ASSERT_TRUE(begun.has_value() && begun->first.opcode == memd::Opcode::kBeginReply);
  c.Send(
      memd::EncodeFrameHeader({memd::Opcode::kPutData, 0, 2, static_cast<uint32_t>(body.size())}));
  // Eight pieces 100 ms apart: 0.7 s in all, about 23 MiB/s (due in 4.3 s).
  const size_t piece = (body.size() + 7) / 8;
  for (size_t at = 0; at < body.size(); at += piece) {
    if (at != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::span<const std::byte> part =
        std::span(body).subspan(at, std::min(piece, body.size() - at));
    while (!part.empty()) {  // no SIGPIPE should the server close: that would end the binary
      const ssize_t n = send(c.fd(), part.data(), part.size(), MSG_NOSIGNAL);
      ASSERT_GT(n, 0) << "the server closed the connection " << at << " bytes into the item";
      part = part.subspan(static_cast<size_t>(n));
    }
  }
  c.Send(memd::Frame(memd::Opcode::kPutCommit, 2, {}));
  auto r = c.ReadFrame();
  ASSERT_TRUE(r.has_value()) << "the connection was closed";
  ASSERT_EQ(r->first.opcode, memd::Opcode::kStatusReply);
  auto codes = memd::DecodeStatusList(r->second);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  EXPECT_EQ(codes->codes, std::vector<StatusCode>{StatusCode::kOk});
  EXPECT_EQ(server_->GetStats().used_slots, 1u);
}

TEST(MemdStatsReplyTest, ManyNamespacesFitOneReplyLargestFirst) {
  memd::Stats s;
  s.slot_bytes = 4096;
  s.slot_count = 100000;
  s.used_slots = 10000;
  s.evictions = 3;
  for (uint64_t i = 0; i < 10000; ++i) s.namespaces.push_back({i, 1, (i * 7919) % 10007});
  std::vector<std::byte> body = memd::EncodeBody(s);
  ASSERT_LE(body.size(), memd::kMaxControlBodyBytes);
  // The client's checks: the frame header's cap, then the body.
  std::vector<std::byte> frame = memd::Frame(memd::Opcode::kStatsReply, 1, body);
  ASSERT_TRUE(memd::DecodeFrameHeader(std::span(frame).first(memd::kFrameHeaderBytes), 4096).ok());
  auto d = memd::DecodeStats(body);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->used_slots, 10000u);
  EXPECT_EQ(d->evictions, 3u);
  ASSERT_EQ(d->namespaces.size(), memd::kMaxStatsNamespaces);
  std::vector<uint64_t> all;
  for (const auto& u : s.namespaces) all.push_back(u.bytes);
  std::sort(all.rbegin(), all.rend());
  const uint64_t smallest_kept = all[memd::kMaxStatsNamespaces - 1];
  std::set<uint64_t> ids;
  for (const auto& u : d->namespaces) {
    EXPECT_GE(u.bytes, smallest_kept);
    EXPECT_EQ(u.bytes, (u.ns * 7919) % 10007) << "namespace " << u.ns;
    ids.insert(u.ns);
  }
  EXPECT_EQ(ids.size(), d->namespaces.size());
}

TEST(MemdStatsReplyTest, AListThatFitsIsSentAsItIs) {
  memd::Stats s;
  for (uint64_t i = 0; i < memd::kMaxStatsNamespaces; ++i) s.namespaces.push_back({i, i, i});
  auto d = memd::DecodeStats(memd::EncodeBody(s));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->namespaces.size(), s.namespaces.size());
  for (size_t i = 0; i < s.namespaces.size(); ++i) EXPECT_EQ(d->namespaces[i].ns, i);
}

}  // namespace
}  // namespace kvtier::testing
