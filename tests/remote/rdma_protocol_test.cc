// The RDMA extension of the memd protocol without a device: frame bodies,
// the client's checks of grants and leases, and the server's grant and lease
// bookkeeping over a real MemdPool (the client's RDMA WRITE is played by a
// memcpy into the granted slot).
#include "tiers/remote/rdma_protocol.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/remote/memd_test_pool.h"
#include "tiers/remote/memd_reservations.h"
#include "tiers/remote/rdma_grants.h"

namespace kvtier::internal::memd {
namespace {

constexpr uint64_t kSlot = 4096;
constexpr NamespaceId kNs{42};
constexpr RdmaRegion kRegion{0x7f0000000000, 8 * kSlot, 0xABCD};

QpEndpoint Qp(uint32_t qpn, uint32_t psn) {
  QpEndpoint q{qpn, 7, {}, psn};
  for (size_t i = 0; i < q.gid.size(); ++i) q.gid[i] = static_cast<std::byte>(i * 3);
  return q;
}

TEST(RdmaProtocolTest, HelloAndReadyRoundTrip) {
  auto hello = DecodeRdmaHello(EncodeBody(RdmaHello{Qp(0x123456, 0xABCDEF)}));
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  EXPECT_EQ(hello->qp.qp_num, 0x123456u);
  EXPECT_EQ(hello->qp.psn, 0xABCDEFu);
  EXPECT_EQ(hello->qp.lid, 7u);
  EXPECT_EQ(hello->qp.gid[5], std::byte{15});
  auto ready = DecodeRdmaReady(EncodeBody(RdmaReady{Qp(9, 1), kRegion, 500}));
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_EQ(ready->pool.addr, kRegion.addr);
  EXPECT_EQ(ready->pool.bytes, kRegion.bytes);
  EXPECT_EQ(ready->pool.rkey, kRegion.rkey);
  EXPECT_EQ(ready->lease_ms, 500u);
}

TEST(RdmaProtocolTest, RejectsBadVersionsSizesAndFields) {
  std::vector<std::byte> hello = EncodeBody(RdmaHello{Qp(5, 5)});
  hello[0] = std::byte{2};
  EXPECT_EQ(DecodeRdmaHello(hello).status().message(),
            "RDMA_HELLO: RDMA protocol version 2 is not supported; expected 1");
  // A later version is named as such whatever size its body has.
  const std::vector<std::byte> v2{std::byte{2}, std::byte{0}, std::byte{0}};
  for (auto decode :
       {+[](std::span<const std::byte> b) { return DecodeRdmaHello(b).status(); },
        +[](std::span<const std::byte> b) { return DecodeRdmaReady(b).status(); },
        +[](std::span<const std::byte> b) { return DecodeGrantList(b).status(); },
        +[](std::span<const std::byte> b) { return DecodeLeaseReply(b).status(); },
        +[](std::span<const std::byte> b) { return DecodeLeaseRelease(b).status(); }}) {
    EXPECT_NE(decode(v2).message().find(": RDMA protocol version 2 is not supported; expected 1"),
              std::string::npos)
        << decode(v2).message();
    EXPECT_EQ(decode({}).code(), StatusCode::kInvalidArgument);
    EXPECT_NE(decode({}).message().find("body is truncated"), std::string::npos);
  }
  hello = EncodeBody(RdmaHello{Qp(5, 5)});
  hello.pop_back();
  EXPECT_EQ(DecodeRdmaHello(hello).status().message(), "RDMA_HELLO body is truncated");
  hello = EncodeBody(RdmaHello{Qp(5, 5)});
  hello.push_back(std::byte{0});
  EXPECT_EQ(DecodeRdmaHello(hello).status().message(), "RDMA_HELLO body has 1 trailing bytes");
  EXPECT_EQ(DecodeRdmaHello(EncodeBody(RdmaHello{Qp(1u << 24, 5)})).status().message(),
            "RDMA_HELLO: queue pair number or PSN is not a 24-bit value");
  EXPECT_EQ(DecodeRdmaHello(EncodeBody(RdmaHello{Qp(0, 5)})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeRdmaReady(EncodeBody(RdmaReady{Qp(9, 1), kRegion, 0})).status().message(),
            "RDMA_READY: lease of 0 ms is outside 1..60000");
  EXPECT_EQ(DecodeRdmaReady(EncodeBody(RdmaReady{Qp(9, 1), {UINT64_MAX - 10, 100, 1}, 5}))
                .status()
                .message(),
            "RDMA_READY: the pool region is empty or wraps around");
  EXPECT_EQ(DecodeLeaseRelease(EncodeBody(LeaseRelease{0})).status().message(),
            "LEASE_RELEASE: lease id 0");
}

TEST(RdmaProtocolTest, GrantAndLeaseListsRoundTripAndBoundTheirCounts) {
  GrantList g{{{StatusCode::kOk, kRegion.addr + kSlot, kRegion.rkey, 1064},
               {StatusCode::kResourceExhausted, 0, 0, 0}}};
  auto got = DecodeGrantList(EncodeBody(g));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->items.size(), 2u);
  EXPECT_EQ(got->items[0].addr, kRegion.addr + kSlot);
  EXPECT_EQ(got->items[0].bytes, 1064u);
  EXPECT_EQ(got->items[1].code, StatusCode::kResourceExhausted);
  LeaseReply l{77, {{StatusCode::kNotFound, 0, 0, 0}}};
  auto lease = DecodeLeaseReply(EncodeBody(l));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->lease_id, 77u);
  EXPECT_EQ(lease->items[0].code, StatusCode::kNotFound);
  // A count that promises more items than the body holds is refused before
  // anything is allocated.
  std::vector<std::byte> body = EncodeBody(g);
  body[1] = std::byte{0xFF};
  body[2] = std::byte{0x0F};
  body[3] = std::byte{0x01};
  EXPECT_EQ(DecodeGrantList(body).status().message(), "PUT_GRANT count 69631 is outside 1..4096");
  body[3] = std::byte{0};
  body[2] = std::byte{0};
  body[1] = std::byte{3};
  EXPECT_EQ(DecodeGrantList(body).status().message(), "PUT_GRANT body does not match its count");
  body[1] = std::byte{0};
  EXPECT_EQ(DecodeGrantList(body).status().message(), "PUT_GRANT count 0 is outside 1..4096");
}

TEST(RdmaProtocolTest, ClientRejectsGrantsOutsideThePoolOrOfTheWrongSize) {
  const uint64_t end = kRegion.addr + kRegion.bytes;
  EXPECT_TRUE(CheckGrant(kRegion, {StatusCode::kOk, end - 1064, kRegion.rkey, 1064}, 1064).ok());
  EXPECT_TRUE(CheckGrant(kRegion, {StatusCode::kResourceExhausted, 0, 0, 0}, 1064).ok());
  EXPECT_EQ(CheckGrant(kRegion, {StatusCode::kOk, kRegion.addr, 1, 1064}, 1064).message(),
            "grant names rkey 1, not the pool's 43981");
  EXPECT_EQ(
      CheckGrant(kRegion, {StatusCode::kOk, end - 1063, kRegion.rkey, 1064}, 1064).message(),
      "grant of 1064 bytes at " + std::to_string(end - 1063) + " lies outside the registered pool");
  EXPECT_EQ(
      CheckGrant(kRegion, {StatusCode::kOk, kRegion.addr - 1, kRegion.rkey, 1064}, 1064).code(),
      StatusCode::kInvalidArgument);
  // An address near the top of the address space must not wrap the check.
  EXPECT_EQ(
      CheckGrant(kRegion, {StatusCode::kOk, UINT64_MAX - 10, kRegion.rkey, 1064}, 1064).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CheckGrant(kRegion, {StatusCode::kOk, kRegion.addr, kRegion.rkey, 2000}, 1064).message(),
      "grant of 2000 bytes for a block of 1064");
  EXPECT_TRUE(CheckLease(kRegion, {StatusCode::kOk, kRegion.addr, kRegion.rkey, 500}, 1064).ok());
  EXPECT_EQ(CheckLease(kRegion, {StatusCode::kOk, kRegion.addr, kRegion.rkey, 64}, 1064).message(),
            "leased block of 64 bytes does not fit 65..1064");
  EXPECT_EQ(CheckLease(kRegion, {StatusCode::kOk, kRegion.addr, kRegion.rkey, 2000}, 1064).code(),
            StatusCode::kInvalidArgument);
}

// What the client's RDMA WRITE does: a stored block at the granted address.
void WriteGranted(MemdPool& pool, const RemoteSlot& g, BlockKey key, std::byte fill) {
  const uint64_t payload = g.bytes - kBlockHeaderBytes;
  std::vector<std::byte> data(payload, fill);
  std::span<std::byte> dst = pool.mapping().subspan(g.addr - kRegion.addr, g.bytes);
  EncodeBlockHeader(MakeBlockHeader(kNs, key, data), dst);
  std::memcpy(dst.data() + kBlockHeaderBytes, data.data(), payload);
}

TEST(RdmaGrantsTest, GrantWriteCommitPublishesOnlyWhatWasWritten) {
  auto pool = SmallPool(4, kSlot);
  MemdReservations table(*pool, 16);
  RdmaGrants grants(*pool, table, kRegion, 500);
  auto g = grants.Begin(9, PutBegin{kNs, {{{1, 1}, 1000}, {{1, 2}, 1000}}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->items.size(), 2u);
  for (const RemoteSlot& s : g->items) {
    EXPECT_EQ(s.code, StatusCode::kOk);
    EXPECT_TRUE(CheckGrant(kRegion, s, 1064).ok());
  }
  EXPECT_NE(g->items[0].addr, g->items[1].addr);
  EXPECT_EQ(grants.reserved_items(), 2u);
  WriteGranted(*pool, g->items[0], {1, 1}, std::byte{5});  // item 1 is never written
  auto c = grants.Commit(9);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->codes, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kCorruption}));
  EXPECT_TRUE(pool->Contains(kNs, {1, 1}));
  EXPECT_FALSE(pool->Contains(kNs, {1, 2}));
  EXPECT_EQ(pool->used_slots(), 1u);
  EXPECT_EQ(grants.reserved_items(), 0u);
  EXPECT_EQ(grants.Commit(9).status().message(), "PUT_COMMIT names no PUT_BEGIN");
}

TEST(RdmaGrantsTest, RefusesOverfullPoolsReusedIdsAndTheReservationLimit) {
  auto pool = SmallPool(2, kSlot);
  MemdReservations table(*pool, 4);
  RdmaGrants grants(*pool, table, kRegion, 500);
  auto g = grants.Begin(1, PutBegin{kNs, {{{1, 1}, 10}, {{1, 2}, 10}, {{1, 3}, 10}}});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->items[2].code, StatusCode::kResourceExhausted);
  EXPECT_EQ(g->items[2].addr, 0u);
  EXPECT_EQ(grants.Begin(1, PutBegin{kNs, {{{2, 1}, 10}}}).status().code(),
            StatusCode::kInvalidArgument);
  // Refused items count: three reserved, and two more exceed the limit of 4,
  // so both are refused.
  auto past = grants.Begin(2, PutBegin{kNs, {{{2, 1}, 10}, {{2, 2}, 10}}});
  ASSERT_TRUE(past.ok()) << past.status().ToString();
  EXPECT_EQ(past->items[0].code, StatusCode::kResourceExhausted);
  EXPECT_EQ(past->items[1].code, StatusCode::kResourceExhausted);
  EXPECT_EQ(past->items[1].addr, 0u);
  EXPECT_EQ(grants.Begin(3, PutBegin{kNs, {{{2, 1}, 5000}}})->items[0].code,
            StatusCode::kInvalidArgument);
}

TEST(RdmaGrantsTest, LeasedBlocksStayInPlaceUntilReleasedOrExpired) {
  auto pool = SmallPool(2, kSlot);
  MemdReservations table(*pool, 16);
  RdmaGrants grants(*pool, table, kRegion, 500);
  auto g = grants.Begin(1, PutBegin{kNs, {{{1, 1}, 100}}});
  WriteGranted(*pool, g->items[0], {1, 1}, std::byte{1});
  ASSERT_EQ(grants.Commit(1)->codes[0], StatusCode::kOk);
  auto leased = grants.Lease(KeyBatch{kNs, {{1, 1}, {9, 9}}}, 1000);
  ASSERT_TRUE(leased.ok()) << leased.status().ToString();
  const LeaseReply& l = *leased;
  ASSERT_NE(l.lease_id, 0u);
  EXPECT_EQ(l.items[0].addr, g->items[0].addr);
  EXPECT_EQ(l.items[0].bytes, 164u);
  EXPECT_EQ(l.items[1].code, StatusCode::kNotFound);
  // Removed while leased: gone from the index, but its slot is not reused.
  EXPECT_TRUE(pool->Remove(kNs, {1, 1}));
  EXPECT_EQ(pool->used_slots(), 1u);
  EXPECT_EQ(grants.Expire(1499), 0u);
  EXPECT_EQ(grants.Expire(1500), 1u);
  EXPECT_EQ(pool->used_slots(), 0u);
  EXPECT_FALSE(grants.Release(l.lease_id));  // late release after expiry
  EXPECT_EQ(grants.Lease(KeyBatch{kNs, {{1, 1}}}, 2000)->lease_id, 0u);
}

TEST(RdmaGrantsTest, ReleaseEndsOneLeaseAndTeardownFreesEverything) {
  auto pool = SmallPool(4, kSlot);
  {
    MemdReservations table(*pool, 16);
    RdmaGrants grants(*pool, table, kRegion, 500);
    auto g = grants.Begin(1, PutBegin{kNs, {{{1, 1}, 100}}});
    WriteGranted(*pool, g->items[0], {1, 1}, std::byte{1});
    ASSERT_EQ(grants.Commit(1)->codes[0], StatusCode::kOk);
    LeaseReply a = grants.Lease(KeyBatch{kNs, {{1, 1}}}, 0).value();
    LeaseReply b = grants.Lease(KeyBatch{kNs, {{1, 1}}}, 0).value();
    EXPECT_NE(a.lease_id, b.lease_id);
    EXPECT_EQ(grants.open_leases(), 2u);
    EXPECT_TRUE(grants.Release(a.lease_id));
    EXPECT_EQ(grants.open_leases(), 1u);
    EXPECT_TRUE(pool->Remove(kNs, {1, 1}));
    EXPECT_EQ(pool->used_slots(), 1u);  // b still pins it
    ASSERT_TRUE(grants.Begin(2, PutBegin{kNs, {{{2, 2}, 100}}}).ok());
    EXPECT_EQ(pool->used_slots(), 2u);
  }
  // The grant never committed and the open lease both ended with the connection.
  EXPECT_EQ(pool->used_slots(), 0u);
}

// One connection's leases pin at most three quarters of the pool (3 of 4
// slots): items past that are refused, not pinned, and another connection
// can still store a block. Before, every found block was pinned, and the
// other connection's PUT_BEGIN found no slot it could reuse.
TEST(RdmaGrantsTest, LeasesPinAtMostThreeQuartersOfThePool) {
  auto pool = SmallPool(4, kSlot);
  MemdReservations table(*pool, 16), other_table(*pool, 16);
  RdmaGrants grants(*pool, table, kRegion, 500), other(*pool, other_table, kRegion, 500);
  const std::vector<BlockKey> keys{{1, 1}, {1, 2}, {1, 3}, {1, 4}};
  auto g = grants.Begin(
      1, PutBegin{kNs, {{keys[0], 100}, {keys[1], 100}, {keys[2], 100}, {keys[3], 100}}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (size_t i = 0; i < keys.size(); ++i) WriteGranted(*pool, g->items[i], keys[i], std::byte{1});
  ASSERT_EQ(grants.Commit(1)->codes, std::vector<StatusCode>(4, StatusCode::kOk));

  auto l = grants.Lease(KeyBatch{kNs, keys}, 0);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_NE(l->lease_id, 0u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(l->items[i].code, StatusCode::kOk) << i;
  EXPECT_EQ(l->items[3].code, StatusCode::kResourceExhausted);
  EXPECT_EQ(l->items[3].addr, 0u);
  EXPECT_EQ(grants.leased_slots(), 3u);
  // At the limit a lease pins nothing and is not opened.
  auto none = grants.Lease(KeyBatch{kNs, {keys[0]}}, 0);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->lease_id, 0u);
  EXPECT_EQ(none->items[0].code, StatusCode::kResourceExhausted);
  EXPECT_EQ(grants.open_leases(), 1u);

  // The unpinned block is evicted for another connection's put.
  auto put = other.Begin(1, PutBegin{kNs, {{{2, 1}, 100}}});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->items[0].code, StatusCode::kOk);

  EXPECT_TRUE(grants.Release(l->lease_id));
  EXPECT_EQ(grants.leased_slots(), 0u);
  auto again = grants.Lease(KeyBatch{kNs, {keys[0]}}, 0);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->items[0].code, StatusCode::kOk);
}

// A connection that keeps opening leases without releasing them is cut off
// at the open-lease limit (2 here) with a clear protocol error. Before,
// leases grew without bound.
TEST(RdmaGrantsTest, OpeningLeasesPastTheLimitIsAProtocolError) {
  auto pool = SmallPool(4, kSlot);
  MemdReservations table(*pool, 16);
  RdmaGrants grants(*pool, table, kRegion, 500, /*max_leases=*/2);
  auto g = grants.Begin(1, PutBegin{kNs, {{{1, 1}, 100}}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  WriteGranted(*pool, g->items[0], {1, 1}, std::byte{1});
  ASSERT_EQ(grants.Commit(1)->codes[0], StatusCode::kOk);
  auto a = grants.Lease(KeyBatch{kNs, {{1, 1}}}, 0);
  auto b = grants.Lease(KeyBatch{kNs, {{1, 1}}}, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = grants.Lease(KeyBatch{kNs, {{1, 1}}}, 0);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  EXPECT_EQ(c.status().message(), "GET_LEASE past the limit of 2 open leases on one connection");
  EXPECT_EQ(grants.open_leases(), 2u);
  EXPECT_TRUE(grants.Release(a->lease_id));
  EXPECT_TRUE(grants.Lease(KeyBatch{kNs, {{1, 1}}}, 0).ok());
}

}  // namespace
}  // namespace kvtier::internal::memd
