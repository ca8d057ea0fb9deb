// The server side of the RDMA data path, frame by frame, against a real
// MemdPool and the in-process stand-in device: queue-pair exchange, grants
// written one-sided and committed, leases, expiry and teardown.
#include "tiers/remote/rdma_session.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/remote/fake_rdma_device.h"
#include "tests/remote/memd_test_pool.h"

namespace kvtier::internal::memd {
namespace {

using testing::FakeRdmaFabric;
using testing::RdmaDev;

constexpr uint64_t kSlot = 4096;
constexpr NamespaceId kNs{42};
constexpr uint32_t kLeaseMs = 50;

class RdmaSessionTest : public ::testing::TestWithParam<RdmaDev> {
 protected:
  void SetUp() override {
    auto factory = testing::DeviceFor(GetParam(), fabric_);
    if (!factory.ok()) GTEST_SKIP() << "no RDMA device: " << factory.status().message();
    pool_ = SmallPool(4, kSlot);
    ASSERT_NE(pool_, nullptr);
    device_ = std::move((*factory)()).value();
    mr_ = std::move(device_->Register(pool_->mapping())).value();
    table_ = std::make_unique<MemdReservations>(*pool_, 8);
    session_ = std::make_unique<RdmaSession>(*pool_, *device_, *table_,
                                             RdmaSession::Options{mr_->region(), kLeaseMs});
  }
  Result<std::optional<RdmaSession::Reply>> Send(Opcode op, uint32_t id,
                                                 const std::vector<std::byte>& body,
                                                 uint64_t now_ms = 1000) {
    return session_->Handle(op, id, body, now_ms);
  }
  // Connects the session to a queue pair of the same device (loopback).
  RdmaReady Hello() {
    client_qp_ = std::move(device_->CreateQp()).value();
    auto r = Send(Opcode::kRdmaHello, 1, EncodeBody(RdmaHello{client_qp_->local()}));
    EXPECT_TRUE(r.ok() && *r) << r.status().ToString();
    EXPECT_EQ((*r)->op, Opcode::kRdmaReady);
    RdmaReady ready = std::move(DecodeRdmaReady((*r)->body)).value();
    EXPECT_TRUE(client_qp_->Connect(ready.qp).ok());
    return ready;
  }
  // PUT_BEGIN for one block of `payload` bytes; writes it where granted
  // (as the client's RDMA WRITE would) unless `write` is false.
  StatusCode Put(uint32_t id, BlockKey key, size_t payload, bool write = true) {
    auto g = Send(Opcode::kPutBegin, id, EncodeBody(PutBegin{kNs, {{key, payload}}}));
    EXPECT_TRUE(g.ok() && *g) << g.status().ToString();
    EXPECT_EQ((*g)->op, Opcode::kPutGrant);
    GrantList grants = std::move(DecodeGrantList((*g)->body)).value();
    EXPECT_TRUE(CheckGrant(mr_->region(), grants.items[0], payload + kBlockHeaderBytes).ok());
    if (write) {
      std::vector<std::byte> data(payload, std::byte{0x5A});
      auto* dst = reinterpret_cast<std::byte*>(grants.items[0].addr);
      EncodeBlockHeader(MakeBlockHeader(kNs, key, data), {dst, kBlockHeaderBytes});
      std::memcpy(dst + kBlockHeaderBytes, data.data(), payload);
    }
    auto c = Send(Opcode::kPutCommit, id, {});
    EXPECT_TRUE(c.ok() && *c) << c.status().ToString();
    EXPECT_EQ((*c)->op, Opcode::kStatusReply);
    return std::move(DecodeStatusList((*c)->body)).value().codes.at(0);
  }
  LeaseReply Lease(std::vector<BlockKey> keys, uint64_t now_ms) {
    auto r = Send(Opcode::kGetLease, 9, EncodeBody(KeyBatch{kNs, std::move(keys)}), now_ms);
    EXPECT_TRUE(r.ok() && *r) << r.status().ToString();
    EXPECT_EQ((*r)->op, Opcode::kLeaseReply);
    return std::move(DecodeLeaseReply((*r)->body)).value();
  }

  FakeRdmaFabric fabric_;
  std::unique_ptr<MemdPool> pool_;
  std::unique_ptr<RdmaDevice> device_;
  std::unique_ptr<RdmaMemory> mr_;
  std::unique_ptr<RdmaQp> client_qp_;
  std::unique_ptr<MemdReservations> table_;  // the connection's, TCP puts included
  std::unique_ptr<RdmaSession> session_;
};

TEST_P(RdmaSessionTest, HelloConnectsAQueuePairAndAnswersWithThePool) {
  EXPECT_FALSE(session_->Handles(Opcode::kPutBegin));
  EXPECT_TRUE(session_->Handles(Opcode::kRdmaHello));
  RdmaReady ready = Hello();
  EXPECT_TRUE(session_->connected());
  EXPECT_TRUE(session_->Handles(Opcode::kPutBegin));
  EXPECT_TRUE(session_->Handles(Opcode::kPutCommit));
  EXPECT_FALSE(session_->Handles(Opcode::kGet));
  EXPECT_NE(ready.qp.qp_num, client_qp_->local().qp_num);
  EXPECT_EQ(ready.pool.addr, reinterpret_cast<uint64_t>(pool_->mapping().data()));
  EXPECT_EQ(ready.pool.bytes, pool_->mapping().size());
  EXPECT_EQ(ready.pool.rkey, mr_->region().rkey);
  EXPECT_EQ(ready.lease_ms, kLeaseMs);
  auto again = Send(Opcode::kRdmaHello, 2, EncodeBody(RdmaHello{{0x123, 3, {}, 0x456}}));
  EXPECT_EQ(again.status().ToString(),
            "invalid_argument: RDMA_HELLO repeated on a connected session");
}

TEST_P(RdmaSessionTest, FramesBeforeHelloAndFailedConnectsAreProtocolErrors) {
  auto r = Send(Opcode::kGetLease, 1, EncodeBody(KeyBatch{kNs, {{1, 1}}}));
  EXPECT_EQ(r.status().ToString(),
            "invalid_argument: RDMA frame before RDMA_HELLO connected the queue pair");
  if (GetParam() == RdmaDev::kFake) {
    r = Send(Opcode::kRdmaHello, 1, EncodeBody(RdmaHello{{0xDEAD, 3, {}, 1}}));
    EXPECT_EQ(r.status().ToString(), "io_error: ibv_modify_qp RTR: Invalid argument");
    EXPECT_FALSE(session_->connected());
  }
  r = Send(Opcode::kRdmaHello, 1, std::vector<std::byte>(3));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(RdmaSessionTest, GrantedWritesAreCommittedAndLeasedUntilRelease) {
  Hello();
  EXPECT_EQ(Put(2, {1, 1}, 1000), StatusCode::kOk);
  EXPECT_EQ(pool_->used_slots(), 1u);
  LeaseReply l = Lease({{1, 1}, {9, 9}}, 1000);
  ASSERT_EQ(l.items.size(), 2u);
  EXPECT_EQ(l.lease_id, 1u);
  EXPECT_EQ(l.items[0].code, StatusCode::kOk);
  EXPECT_EQ(l.items[0].bytes, 1000 + kBlockHeaderBytes);
  EXPECT_EQ(l.items[1].code, StatusCode::kNotFound);
  EXPECT_TRUE(CheckLease(mr_->region(), l.items[0], kSlot).ok());
  const auto* stored = reinterpret_cast<const std::byte*>(l.items[0].addr);
  EXPECT_EQ(stored[kBlockHeaderBytes + 999], std::byte{0x5A});
  EXPECT_EQ(session_->open_leases(), 1u);
  auto rel = Send(Opcode::kLeaseRelease, 9, EncodeBody(LeaseRelease{1}));
  ASSERT_TRUE(rel.ok());
  EXPECT_FALSE(rel->has_value());  // no reply
  EXPECT_EQ(session_->open_leases(), 0u);
  // A late release of an ended lease is not an error.
  EXPECT_TRUE(Send(Opcode::kLeaseRelease, 9, EncodeBody(LeaseRelease{1})).ok());
}

TEST_P(RdmaSessionTest, AnUnwrittenGrantFailsItsCommitAndFreesTheSlot) {
  Hello();
  EXPECT_EQ(Put(2, {1, 1}, 1000, /*write=*/false), StatusCode::kCorruption);
  EXPECT_EQ(pool_->used_slots(), 0u);
  EXPECT_EQ(Send(Opcode::kPutCommit, 2, {}).status().ToString(),
            "invalid_argument: PUT_COMMIT names no PUT_BEGIN");
}

TEST_P(RdmaSessionTest, LeasesPinRemovedBlocksUntilTheyExpire) {
  Hello();
  ASSERT_EQ(Put(2, {1, 1}, 100), StatusCode::kOk);
  LeaseReply l = Lease({{1, 1}}, 1000);
  ASSERT_EQ(l.items[0].code, StatusCode::kOk);
  ASSERT_TRUE(pool_->Remove(kNs, {1, 1}));
  EXPECT_EQ(pool_->used_slots(), 1u);  // pinned by the lease
  EXPECT_EQ(session_->Expire(1000 + kLeaseMs - 1), 0u);
  EXPECT_EQ(pool_->used_slots(), 1u);
  EXPECT_EQ(session_->Expire(1000 + kLeaseMs), 1u);
  EXPECT_EQ(pool_->used_slots(), 0u);
  EXPECT_EQ(session_->open_leases(), 0u);
}

TEST_P(RdmaSessionTest, TeardownCancelsGrantsAndEndsLeases) {
  Hello();
  ASSERT_EQ(Put(2, {1, 1}, 100), StatusCode::kOk);
  auto g = Send(Opcode::kPutBegin, 3, EncodeBody(PutBegin{kNs, {{{2, 2}, 100}, {{3, 3}, 100}}}));
  ASSERT_TRUE(g.ok());
  Lease({{1, 1}}, 1000);
  ASSERT_TRUE(pool_->Remove(kNs, {1, 1}));
  EXPECT_EQ(pool_->used_slots(), 3u);
  EXPECT_EQ(session_->reserved_items(), 2u);
  session_.reset();
  EXPECT_EQ(pool_->used_slots(), 0u);
}

TEST_P(RdmaSessionTest, ReservationsAreBoundedPerConnection) {
  Hello();
  std::vector<PutItem> items(9, PutItem{{1, 1}, 10});
  auto r = Send(Opcode::kPutBegin, 2, EncodeBody(PutBegin{kNs, items}));
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().ToString();
  GrantList grants = std::move(DecodeGrantList((*r)->body)).value();
  ASSERT_EQ(grants.items.size(), 9u);
  for (const RemoteSlot& g : grants.items) EXPECT_EQ(g.code, StatusCode::kResourceExhausted);
  EXPECT_EQ(pool_->used_slots(), 0u);
}

TEST_P(RdmaSessionTest, TcpPutsOfTheConnectionCountAgainstItsGrants) {
  // Six items begun over TCP before the switch to RDMA (only four fit the
  // pool; the refused two count all the same).
  std::vector<PutItem> tcp(6, PutItem{{7, 7}, 10});
  ASSERT_TRUE(table_->Begin(40, PutPath::kTcp, PutBegin{kNs, tcp}).ok());
  EXPECT_EQ(pool_->used_slots(), 4u);
  Hello();
  std::vector<PutItem> three(3, PutItem{{1, 1}, 10});
  auto refused = Send(Opcode::kPutBegin, 2, EncodeBody(PutBegin{kNs, three}));
  ASSERT_TRUE(refused.ok() && refused->has_value()) << refused.status().ToString();
  GrantList none = std::move(DecodeGrantList((*refused)->body)).value();
  for (const RemoteSlot& g : none.items) EXPECT_EQ(g.code, StatusCode::kResourceExhausted);
  // Request ids are the connection's, whichever path began them.
  EXPECT_EQ(Send(Opcode::kPutBegin, 40, EncodeBody(PutBegin{kNs, {{{1, 1}, 10}}})).status().code(),
            StatusCode::kInvalidArgument);
  auto two = Send(Opcode::kPutBegin, 3, EncodeBody(PutBegin{kNs, {three[0], three[1]}}));
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(session_->reserved_items(), 8u);
  // Grants go with the session (its queue pair first); TCP puts stay.
  session_.reset();
  EXPECT_EQ(table_->reserved_items(), 6u);
  EXPECT_EQ(table_->open_puts(), 1u);
  EXPECT_EQ(pool_->used_slots(), 4u);
}

INSTANTIATE_TEST_SUITE_P(Device, RdmaSessionTest, KVTIER_RDMA_DEVICES, testing::RdmaDevName);

}  // namespace
}  // namespace kvtier::internal::memd
