// The reservation table of a kvtier-memd connection: one limit for TCP and
// RDMA puts (past it, items are refused, not the connection), commits and
// cancels that give slots back, and requests the table does not know. Then
// the same limit end to end, on an in-process kvtier-memd with transport
// rdma over the stand-in device.
#include "tiers/remote/memd_reservations.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kvtier/block_header.h"
#include "tests/remote/fake_rdma_device.h"
#include "tests/remote/memd_test_pool.h"
#include "tests/remote/raw_memd_client.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/rdma_protocol.h"

namespace kvtier::internal::memd {
namespace {

constexpr uint64_t kSlot = 4096;
constexpr uint64_t kPayload = 100;
constexpr NamespaceId kNs{5};

// `n` items of kPayload bytes, keys {first, 0}, {first + 1, 0}, ...
PutBegin Items(size_t n, uint64_t first) {
  PutBegin m{kNs, {}};
  for (size_t i = 0; i < n; ++i) m.items.push_back({{first + i, 0}, kPayload});
  return m;
}

// What PUT_DATA or the client's RDMA WRITE leaves in a reserved slot.
void Store(MemdPool& pool, const Reservation& r) {
  ASSERT_GE(r.slot, 0);
  std::vector<std::byte> data(kPayload, std::byte{0x3C});
  std::span<std::byte> dst = pool.SlotBytes(static_cast<uint32_t>(r.slot), r.stored_bytes);
  EncodeBlockHeader(MakeBlockHeader(kNs, r.key, data), dst.first(kBlockHeaderBytes));
  std::memcpy(dst.data() + kBlockHeaderBytes, data.data(), kPayload);
}

// A put past the item limit: every item refused with ResourceExhausted and
// no slot taken.
void ExpectRefusedWhole(Result<std::span<const Reservation>> r, size_t items) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), items);
  for (const Reservation& item : *r) {
    EXPECT_EQ(item.slot, -1);
    EXPECT_EQ(item.code, StatusCode::kResourceExhausted);
  }
}

TEST(MemdReservationsTest, OneLimitCoversTcpAndRdmaPuts) {
  auto pool = SmallPool(16, kSlot);
  MemdReservations t(*pool, 6);
  ASSERT_TRUE(t.Begin(1, PutPath::kTcp, Items(4, 10)).ok());
  // Three more would pass a limit of 6 per path, not one per connection.
  ExpectRefusedWhole(t.Begin(2, PutPath::kRdma, Items(3, 20)), 3);
  EXPECT_EQ(pool->used_slots(), 4u) << "a refused PUT_BEGIN reserved slots";
  EXPECT_EQ(t.reserved_items(), 4u);
  ASSERT_TRUE(t.Begin(3, PutPath::kRdma, Items(2, 20)).ok());
  EXPECT_EQ(t.reserved_items(), 6u);
  ExpectRefusedWhole(t.Begin(4, PutPath::kTcp, Items(1, 30)), 1);
  ExpectRefusedWhole(t.Begin(5, PutPath::kRdma, Items(1, 30)), 1);
  // Committing either path makes room for the other.
  auto c = t.Commit(3);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(t.reserved_items(), 4u);
  auto r = t.Begin(6, PutPath::kTcp, Items(2, 30));
  ASSERT_TRUE(r.ok());
  EXPECT_GE((*r)[1].slot, 0);
  EXPECT_EQ(t.reserved_items(), 6u);
}

// Past the item limit a client is told its items did not fit, not cut off
// with every other request on its connection; its data is dropped and its
// commit answers the same codes. Such puts left open are bounded.
TEST(MemdReservationsTest, APutPastTheItemLimitIsRefusedWholeNotAnError) {
  auto pool = SmallPool(8, kSlot);
  MemdReservations t(*pool, 4);
  constexpr uint64_t kStored = kPayload + kBlockHeaderBytes;
  ASSERT_TRUE(t.Begin(1, PutPath::kTcp, Items(3, 1)).ok());
  ExpectRefusedWhole(t.Begin(2, PutPath::kTcp, Items(2, 10)), 2);
  EXPECT_EQ(pool->used_slots(), 3u);
  EXPECT_EQ(t.reserved_items(), 3u);
  EXPECT_EQ(t.open_puts(), 2u);
  auto f = t.Fill(2, 1, kStored);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->slot, -1);
  // Its data is bounded by what its items declared: one more item's worth
  // fits, a byte past that is an error.
  ASSERT_TRUE(t.Fill(2, 1, kStored - 1).ok());
  EXPECT_EQ(t.Fill(2, 0, 2).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(t.Fill(2, 0, 1).ok());
  EXPECT_EQ(t.Fill(2, 0, 1).status().code(), StatusCode::kInvalidArgument);
  auto c = t.Commit(2);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->codes, (std::vector<StatusCode>{StatusCode::kResourceExhausted,
                                               StatusCode::kResourceExhausted}));
  EXPECT_EQ(t.open_puts(), 1u);
  EXPECT_EQ(t.Commit(2).status().code(), StatusCode::kInvalidArgument);
  for (uint32_t id = 100; id < 100 + kMaxRefusedPuts; ++id) {
    ASSERT_NO_FATAL_FAILURE(ExpectRefusedWhole(t.Begin(id, PutPath::kRdma, Items(2, 1)), 2));
  }
  EXPECT_EQ(t.Begin(5000, PutPath::kTcp, Items(2, 1)).status().ToString(),
            "invalid_argument: PUT_BEGIN past the reservation limit with 1024 puts refused for "
            "it still open");
  t.Cancel(PutPath::kRdma);
  ExpectRefusedWhole(t.Begin(5000, PutPath::kTcp, Items(2, 1)), 2);
  EXPECT_EQ(t.reserved_items(), 3u);
  EXPECT_EQ(pool->used_slots(), 3u);
}

TEST(MemdReservationsTest, RefusedItemsCountAgainstTheLimit) {
  auto pool = SmallPool(2, kSlot);
  MemdReservations t(*pool, 4);
  auto r = t.Begin(1, PutPath::kTcp, Items(3, 1));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 3u);
  EXPECT_GE((*r)[0].slot, 0);
  EXPECT_GE((*r)[1].slot, 0);
  EXPECT_EQ((*r)[2].slot, -1);
  EXPECT_EQ((*r)[2].code, StatusCode::kResourceExhausted);
  EXPECT_EQ((*r)[0].stored_bytes, kPayload + kBlockHeaderBytes);
  EXPECT_EQ(t.reserved_items(), 3u);
  ExpectRefusedWhole(t.Begin(2, PutPath::kRdma, Items(2, 5)), 2);
  // The refused item's data is still accepted (to be dropped) and it
  // commits with the pool's code.
  auto f = t.Fill(1, 2, kPayload + kBlockHeaderBytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->slot, -1);
  auto c = t.Commit(1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->codes[2], StatusCode::kResourceExhausted);
}

TEST(MemdReservationsTest, CommitPublishesWhatArrivedAndFreesTheRest) {
  auto pool = SmallPool(8, kSlot);
  MemdReservations t(*pool, 8);
  auto tcp = t.Begin(1, PutPath::kTcp, Items(3, 1));
  ASSERT_TRUE(tcp.ok());
  const std::vector<Reservation> items(tcp->begin(), tcp->end());
  // Item 0 arrives intact, item 1 arrives as garbage, item 2 never arrives.
  ASSERT_TRUE(t.Fill(1, 0, items[0].stored_bytes).ok());
  ASSERT_NO_FATAL_FAILURE(Store(*pool, items[0]));
  ASSERT_TRUE(t.Fill(1, 1, items[1].stored_bytes).ok());
  auto c = t.Commit(1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->codes, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kCorruption,
                                               StatusCode::kInvalidArgument}));
  EXPECT_TRUE(pool->Contains(kNs, {1, 0}));
  EXPECT_FALSE(pool->Contains(kNs, {2, 0}));
  EXPECT_EQ(pool->used_slots(), 1u);
  EXPECT_EQ(t.reserved_items(), 0u);
  EXPECT_EQ(t.open_puts(), 0u);
  EXPECT_EQ(t.Commit(1).status().ToString(), "invalid_argument: PUT_COMMIT names no PUT_BEGIN");

  // RDMA items need no PUT_DATA: the header check alone decides.
  auto rdma = t.Begin(2, PutPath::kRdma, Items(2, 10));
  ASSERT_TRUE(rdma.ok());
  ASSERT_NO_FATAL_FAILURE(Store(*pool, (*rdma)[0]));
  c = t.Commit(2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->codes, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kCorruption}));
  EXPECT_EQ(pool->used_slots(), 2u);
  EXPECT_EQ(t.reserved_items(), 0u);
}

// A slot that last held the same block, freed and reserved again for an
// RDMA put the client never writes, must not pass as the new copy.
TEST(MemdReservationsTest, AnRdmaSlotNeverWrittenFailsEvenIfItHeldTheBlock) {
  auto pool = SmallPool(1, kSlot);
  MemdReservations t(*pool, 8);
  auto first = t.Begin(1, PutPath::kRdma, Items(1, 10));
  ASSERT_TRUE(first.ok());
  ASSERT_NO_FATAL_FAILURE(Store(*pool, (*first)[0]));
  const int64_t slot = (*first)[0].slot;  // the span ends with the commit
  auto c = t.Commit(1);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->codes, (std::vector<StatusCode>{StatusCode::kOk}));
  ASSERT_TRUE(pool->Remove(kNs, {10, 0}));  // its one slot is free, bytes left in place
  auto again = t.Begin(2, PutPath::kRdma, Items(1, 10));
  ASSERT_TRUE(again.ok());
  ASSERT_EQ((*again)[0].slot, slot);
  c = t.Commit(2);  // nothing written this time
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->codes, (std::vector<StatusCode>{StatusCode::kCorruption}));
  EXPECT_FALSE(pool->Contains(kNs, {10, 0}));
}

TEST(MemdReservationsTest, CancelGivesSlotsBackByPathOrAll) {
  auto pool = SmallPool(8, kSlot);
  {
    MemdReservations t(*pool, 8);
    ASSERT_TRUE(t.Begin(1, PutPath::kTcp, Items(2, 1)).ok());
    ASSERT_TRUE(t.Begin(2, PutPath::kRdma, Items(2, 10)).ok());
    ASSERT_TRUE(t.Begin(3, PutPath::kTcp, Items(1, 20)).ok());
    EXPECT_EQ(pool->used_slots(), 5u);
    t.Cancel(PutPath::kTcp);
    EXPECT_EQ(pool->used_slots(), 2u);
    EXPECT_EQ(t.reserved_items(), 2u);
    EXPECT_EQ(t.open_puts(), 1u);
    EXPECT_EQ(t.Commit(1).status().code(), StatusCode::kInvalidArgument);
    t.Cancel();
    EXPECT_EQ(pool->used_slots(), 0u);
    EXPECT_EQ(t.reserved_items(), 0u);
    // Freed ids may be used again.
    ASSERT_TRUE(t.Begin(2, PutPath::kTcp, Items(3, 1)).ok());
    EXPECT_EQ(pool->used_slots(), 3u);
  }
  EXPECT_EQ(pool->used_slots(), 0u) << "the table's destructor kept reservations";
}

TEST(MemdReservationsTest, UnknownRequestsAndItemsAreErrors) {
  auto pool = SmallPool(8, kSlot);
  MemdReservations t(*pool, 8);
  constexpr uint64_t kStored = kPayload + kBlockHeaderBytes;
  constexpr auto kNoItem = "invalid_argument: PUT_DATA names no PUT_BEGIN item";
  constexpr auto kBadData =
      "invalid_argument: PUT_DATA repeats an item or its size differs from PUT_BEGIN";
  EXPECT_EQ(t.Commit(7).status().ToString(), "invalid_argument: PUT_COMMIT names no PUT_BEGIN");
  EXPECT_EQ(t.Fill(7, 0, kStored).status().ToString(), kNoItem);
  ASSERT_TRUE(t.Begin(1, PutPath::kTcp, Items(2, 1)).ok());
  EXPECT_EQ(t.Fill(1, 2, kStored).status().ToString(), kNoItem);
  EXPECT_EQ(t.Fill(1, 0, kStored + 1).status().ToString(), kBadData);
  ASSERT_TRUE(t.Fill(1, 0, kStored).ok());
  EXPECT_EQ(t.Fill(1, 0, kStored).status().ToString(), kBadData);
  ASSERT_TRUE(t.Begin(2, PutPath::kRdma, Items(1, 10)).ok());
  EXPECT_EQ(t.Fill(2, 0, kStored).status().ToString(), kNoItem) << "RDMA items take no PUT_DATA";
  // One id space for both paths.
  EXPECT_EQ(t.Begin(1, PutPath::kRdma, Items(1, 20)).status().ToString(),
            "invalid_argument: PUT_BEGIN reuses request id 1, which is still open");
  EXPECT_EQ(t.Begin(2, PutPath::kTcp, Items(1, 20)).status().ToString(),
            "invalid_argument: PUT_BEGIN reuses request id 2, which is still open");
  EXPECT_EQ(t.reserved_items(), 3u);
  EXPECT_EQ(pool->used_slots(), 3u);
}

// Time the server does not read the connection counts as its puts'
// progress, up to a cap over each put's life; time it reads does not.
TEST(MemdReservationsTest, PausesCountAsProgressUpToTheirCap) {
  auto pool = SmallPool(8, kSlot);
  uint64_t now = 1000;
  MemdReservations t(*pool, 8, 8, [&now] { return now; });
  ASSERT_TRUE(t.Begin(1, PutPath::kTcp, Items(1, 1)).ok());
  EXPECT_EQ(t.OldestProgressMs(), 1000u);
  t.PauseProgress(500);
  now = 1300;
  EXPECT_EQ(t.OldestProgressMs(), 1300u) << "a pause under way counts as it goes";
  t.ResumeProgress();
  now = 1400;  // reading: no credit
  EXPECT_EQ(t.OldestProgressMs(), 1300u);
  t.PauseProgress(500);
  now = 2400;  // a second pause, of 1000 ms: only 200 ms of the cap are left
  EXPECT_EQ(t.OldestProgressMs(), 1500u);
  t.ResumeProgress();
  EXPECT_EQ(t.OldestProgressMs(), 1500u);
  // A put begun later has its own cap; the first has used all of its own.
  ASSERT_TRUE(t.Begin(2, PutPath::kTcp, Items(1, 2)).ok());
  t.PauseProgress(500);
  now = 2500;
  t.ResumeProgress();
  EXPECT_EQ(t.OldestProgressMs(), 1500u);
  ASSERT_TRUE(t.Commit(1).ok());
  EXPECT_EQ(t.OldestProgressMs(), 2500u);
}

}  // namespace
}  // namespace kvtier::internal::memd

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{6};

class MemdConnectionLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    memd::MemdServerOptions o;
    o.listen = "127.0.0.1:0";
    o.secret = "limit-test-secret";
    o.transport = "rdma";
    o.rdma_device = fabric_.Factory();
    o.pool.pool_bytes = 16 * (64 << 10);
    o.pool.slot_bytes = 64 << 10;
    o.pool.hugepages = false;
    o.pool.prefault = false;
    o.log = StderrLogSink(LogLevel::kError);
    auto s = memd::MemdServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    device_ = std::move(fabric_.Factory()()).value();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  // A connection that begins TCP puts up to the server's limit: four full
  // batches (most items refused by the small pool; they count all the same).
  std::unique_ptr<RawClient> ConnectAtTheLimit() {
    auto c = std::make_unique<RawClient>(server_->port());
    EXPECT_TRUE(c->connected());
    Authenticate(*c, "limit-test-secret");
    for (uint32_t id = 2; id < 6; ++id) {
      memd::PutBegin m{kNs, {}};
      for (uint64_t i = 0; i < memd::kMaxBatchItems; ++i) m.items.push_back({{id, i}, 10});
      c->Send(memd::Frame(memd::Opcode::kPutBegin, id, memd::EncodeBody(m)));
      auto r = c->ReadFrame();
      EXPECT_TRUE(r.has_value() && r->first.opcode == memd::Opcode::kBeginReply);
    }
    return c;
  }
  // Switches `c` to RDMA (RDMA_HELLO with a stand-in queue pair).
  void SwitchToRdma(RawClient& c) {
    qps_.push_back(std::move(device_->CreateQp()).value());
    c.Send(memd::Frame(memd::Opcode::kRdmaHello, 6,
                       memd::EncodeBody(memd::RdmaHello{qps_.back()->local()})));
    auto r = c.ReadFrame();
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->first.opcode, memd::Opcode::kRdmaReady);
  }
  std::vector<std::byte> OneItem() {
    return memd::Frame(memd::Opcode::kPutBegin, 7,
                       memd::EncodeBody(memd::PutBegin{kNs, {{{9, 9}, 10}}}));
  }

  FakeRdmaFabric fabric_;  // first: outlives the server
  std::unique_ptr<memd::MemdServer> server_;
  std::unique_ptr<memd::RdmaDevice> device_;
  std::vector<std::unique_ptr<memd::RdmaQp>> qps_;
};

// Reads a reply of `op` carrying a status list and returns its codes.
std::vector<StatusCode> ReadCodes(RawClient& c, memd::Opcode op) {
  auto r = c.ReadFrame();
  EXPECT_TRUE(r.has_value()) << "no reply: the connection was closed";
  if (!r.has_value()) return {};
  EXPECT_EQ(r->first.opcode, op);
  auto codes = memd::DecodeStatusList(r->second);
  EXPECT_TRUE(codes.ok()) << codes.status().ToString();
  return codes.ok() ? codes->codes : std::vector<StatusCode>{};
}

// Past the limit a put is refused item by item, on either path, and the
// connection goes on: its other requests are not lost with it.
TEST_F(MemdConnectionLimitTest, PutsPastTheLimitAreRefusedAndTheConnectionStays) {
  auto c = ConnectAtTheLimit();
  const std::vector<StatusCode> refused{StatusCode::kResourceExhausted};
  c->Send(memd::Frame(memd::Opcode::kPutBegin, 6,
                      memd::EncodeBody(memd::PutBegin{kNs, {{{8, 8}, 10}}})));
  // (Nothing more is sent on a connection the server closed.)
  ASSERT_EQ(ReadCodes(*c, memd::Opcode::kBeginReply), refused);
  // The item's data is read and dropped; its commit answers the same.
  c->Send(memd::Frame(memd::Opcode::kPutData, 6, std::vector<std::byte>(10 + kBlockHeaderBytes)));
  c->Send(memd::Frame(memd::Opcode::kPutCommit, 6, {}));
  ASSERT_EQ(ReadCodes(*c, memd::Opcode::kStatusReply), refused);
  ASSERT_NO_FATAL_FAILURE(SwitchToRdma(*c));
  c->Send(OneItem());
  auto r = c->ReadFrame();
  ASSERT_TRUE(r.has_value()) << "the connection was closed";
  ASSERT_EQ(r->first.opcode, memd::Opcode::kPutGrant);
  auto grants = memd::DecodeGrantList(r->second);
  ASSERT_TRUE(grants.ok());
  ASSERT_EQ(grants->items.size(), 1u);
  EXPECT_EQ(grants->items[0].code, StatusCode::kResourceExhausted);
  c->Send(memd::Frame(memd::Opcode::kPutCommit, 7, {}));
  EXPECT_EQ(ReadCodes(*c, memd::Opcode::kStatusReply), refused);
}

TEST_F(MemdConnectionLimitTest, ACommittedTcpPutMakesRoomForGrants) {
  auto c = ConnectAtTheLimit();
  // Nothing was sent for the items request 2 reserved (as many of the 16
  // slots as one connection may hold): their commit fails and frees them.
  c->Send(memd::Frame(memd::Opcode::kPutCommit, 2, {}));
  auto r = c->ReadFrame();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->first.opcode, memd::Opcode::kStatusReply);
  auto codes = memd::DecodeStatusList(r->second);
  ASSERT_TRUE(codes.ok());
  EXPECT_EQ(codes->codes.size(), memd::kMaxBatchItems);
  EXPECT_EQ(codes->codes[0], StatusCode::kInvalidArgument);
  ASSERT_NO_FATAL_FAILURE(SwitchToRdma(*c));
  c->Send(OneItem());
  r = c->ReadFrame();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->first.opcode, memd::Opcode::kPutGrant);
  auto grants = memd::DecodeGrantList(r->second);
  ASSERT_TRUE(grants.ok());
  ASSERT_EQ(grants->items.size(), 1u);
  EXPECT_EQ(grants->items[0].code, StatusCode::kOk);
  EXPECT_EQ(server_->GetStats().used_slots, 1u);
}

}  // namespace
}  // namespace kvtier::testing
