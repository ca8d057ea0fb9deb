// The RDMA extension of the memd protocol (remote_protocol.h): frame bodies
// that set up a reliable-connection queue pair over the authenticated TCP
// control connection, grant slots for one-sided writes and lease stored blocks
// for one-sided reads, plus the client's checks on what the server grants.
// Pure encoding and checking, no verbs, so it is unit-tested and fuzzed on
// machines without an RDMA device.
//
// Every body starts with kRdmaVersion (u8); a peer that speaks another
// version is refused with InvalidArgument, so the messages can evolve.
//   client RDMA_HELLO(version, client QP) -> server RDMA_READY(version,
//     server QP, registered pool region, lease duration)
//   PUT_BEGIN(ns, [key, payload bytes]) -> PUT_GRANT([code, addr, rkey, len])
//     the client RDMA WRITEs each granted stored block (BlockHeader + payload)
//     to [addr, addr + len), then sends PUT_COMMIT -> STATUS_REPLY; the server
//     checks each slot's BlockHeader before publishing it
//   GET_LEASE(ns, keys) -> LEASE_REPLY(lease id, [code, addr, rkey, len])
//     the server pins the found slots until LEASE_RELEASE(lease id) or the
//     lease duration passes; the client RDMA READs them and verifies header
//     and checksum. The client posts no READ after the lease's end as it
//     counts it (from the reply's arrival, less a margin) and fails one
//     completing later, as Unavailable; a reply so late that a READ still
//     sees a reused slot fails the checks: Corruption, never wrong bytes
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal::memd {

inline constexpr uint8_t kRdmaVersion = 1;
// Longest lease a server may grant, and the client's bound on what it accepts.
inline constexpr uint32_t kMaxLeaseMs = 60'000;

// What the peer needs to connect an RC queue pair (ibv_qp_attr fields).
struct QpEndpoint {
  uint32_t qp_num = 0;  // 24 bits
  uint16_t lid = 0;
  std::array<std::byte, 16> gid{};
  uint32_t psn = 0;  // 24 bits
};

// A registered memory region as the peer addresses it.
struct RdmaRegion {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  uint32_t rkey = 0;
};

struct RdmaHello {
  QpEndpoint qp;
};
struct RdmaReady {
  QpEndpoint qp;
  RdmaRegion pool;
  uint32_t lease_ms = 0;  // 1..kMaxLeaseMs
};

// One granted slot (PUT_GRANT) or leased block (LEASE_REPLY). A code other
// than Ok means the item has no remote memory (addr, rkey, bytes are 0).
struct RemoteSlot {
  StatusCode code = StatusCode::kOk;
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t bytes = 0;  // stored block: BlockHeader + payload
};
struct GrantList {
  std::vector<RemoteSlot> items;
};
struct LeaseReply {
  uint64_t lease_id = 0;  // 0: nothing was leased (every item missed)
  std::vector<RemoteSlot> items;
};
struct LeaseRelease {
  uint64_t lease_id = 0;
};

std::vector<std::byte> EncodeBody(const RdmaHello& m);
std::vector<std::byte> EncodeBody(const RdmaReady& m);
std::vector<std::byte> EncodeBody(const GrantList& m);
std::vector<std::byte> EncodeBody(const LeaseReply& m);
std::vector<std::byte> EncodeBody(const LeaseRelease& m);

// Exact sizes, the version, 1..kMaxBatchItems items, 24-bit QP numbers and
// PSNs, a lease duration of 1..kMaxLeaseMs and a non-empty region are
// checked; InvalidArgument naming the field otherwise.
Result<RdmaHello> DecodeRdmaHello(std::span<const std::byte> body);
Result<RdmaReady> DecodeRdmaReady(std::span<const std::byte> body);
Result<GrantList> DecodeGrantList(std::span<const std::byte> body);
Result<LeaseReply> DecodeLeaseReply(std::span<const std::byte> body);
Result<LeaseRelease> DecodeLeaseRelease(std::span<const std::byte> body);

// The client's check of one granted or leased item before it posts an RDMA
// operation against it: the key must be the region's rkey, [addr, addr +
// bytes) must lie inside the region (no overflow), and the length must be
// `expected_bytes` exactly (a grant) or at most `expected_bytes` and more
// than a BlockHeader (a lease: the block may be shorter than the
// destination). OK for an item whose code is not Ok (nothing to post).
// InvalidArgument naming what is wrong: the server is then not trusted and
// the connection is closed.
Status CheckGrant(const RdmaRegion& region, const RemoteSlot& slot, uint64_t expected_bytes);
Status CheckLease(const RdmaRegion& region, const RemoteSlot& slot, uint64_t max_bytes);

}  // namespace kvtier::internal::memd
