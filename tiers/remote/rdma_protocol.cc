#include "tiers/remote/rdma_protocol.h"

#include <string>

#include "kvtier/block_header.h"
#include "tiers/remote/remote_protocol.h"
#include "tiers/remote/wire_codec.h"

namespace kvtier::internal::memd {
namespace {

using wire::Reader;
using wire::Writer;

constexpr uint32_t k24Bits = (1u << 24) - 1;

void PutQp(Writer& w, const QpEndpoint& qp) {
  w.U32(qp.qp_num);
  w.U16(qp.lid);
  w.Bytes(qp.gid);
  w.U32(qp.psn);
}

QpEndpoint GetQp(Reader& r) {
  QpEndpoint qp;
  qp.qp_num = r.U32();
  qp.lid = r.U16();
  r.Bytes(&qp.gid);
  qp.psn = r.U32();
  return qp;
}

Status CheckQp(const QpEndpoint& qp, const char* what) {
  if (qp.qp_num == 0 || qp.qp_num > k24Bits || qp.psn > k24Bits) {
    return Status::InvalidArgument(std::string(what) +
                                   ": queue pair number or PSN is not a 24-bit value");
  }
  return Status::Ok();
}

// Reads the version byte first: a later version may lay out the rest
// differently, so it is named as such rather than as a size mismatch.
Status ReadVersion(Reader& r, const char* what) {
  const uint8_t v = r.U8();
  if (r.remaining() == 0) KVTIER_RETURN_IF_ERROR(r.Done(what));  // an empty body
  if (v == kRdmaVersion) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + ": RDMA protocol version " +
                                 std::to_string(v) + " is not supported; expected " +
                                 std::to_string(kRdmaVersion));
}

void PutSlots(Writer& w, const std::vector<RemoteSlot>& items) {
  w.U32(static_cast<uint32_t>(items.size()));
  for (const RemoteSlot& s : items) {
    w.U8(EncodeCode(s.code));
    w.U64(s.addr);
    w.U32(s.rkey);
    w.U64(s.bytes);
  }
}

// Reads a counted item list, bounding the count before anything is reserved.
Status GetSlots(Reader& r, std::vector<RemoteSlot>* out, const char* what) {
  const uint32_t n = r.U32();
  if (n == 0 || n > kMaxBatchItems) {
    return Status::InvalidArgument(std::string(what) + " count " + std::to_string(n) +
                                   " is outside 1.." + std::to_string(kMaxBatchItems));
  }
  if (r.remaining() != size_t{n} * 21) {
    return Status::InvalidArgument(std::string(what) + " body does not match its count");
  }
  out->resize(n);
  for (RemoteSlot& s : *out) {
    s.code = DecodeCode(r.U8());
    s.addr = r.U64();
    s.rkey = r.U32();
    s.bytes = r.U64();
  }
  return Status::Ok();
}

Status InRegion(const RdmaRegion& region, const RemoteSlot& s, const char* what) {
  if (s.rkey != region.rkey) {
    return Status::InvalidArgument(std::string(what) + " names rkey " + std::to_string(s.rkey) +
                                   ", not the pool's " + std::to_string(region.rkey));
  }
  const bool inside = s.addr >= region.addr && s.bytes <= region.bytes &&
                      s.addr - region.addr <= region.bytes - s.bytes;
  if (!inside) {
    return Status::InvalidArgument(std::string(what) + " of " + std::to_string(s.bytes) +
                                   " bytes at " + std::to_string(s.addr) +
                                   " lies outside the registered pool");
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::byte> EncodeBody(const RdmaHello& m) {
  Writer w;
  w.U8(kRdmaVersion);
  PutQp(w, m.qp);
  return w.Take();
}

std::vector<std::byte> EncodeBody(const RdmaReady& m) {
  Writer w;
  w.U8(kRdmaVersion);
  PutQp(w, m.qp);
  w.U64(m.pool.addr);
  w.U64(m.pool.bytes);
  w.U32(m.pool.rkey);
  w.U32(m.lease_ms);
  return w.Take();
}

std::vector<std::byte> EncodeBody(const GrantList& m) {
  Writer w;
  w.U8(kRdmaVersion);
  PutSlots(w, m.items);
  return w.Take();
}

std::vector<std::byte> EncodeBody(const LeaseReply& m) {
  Writer w;
  w.U8(kRdmaVersion);
  w.U64(m.lease_id);
  PutSlots(w, m.items);
  return w.Take();
}

std::vector<std::byte> EncodeBody(const LeaseRelease& m) {
  Writer w;
  w.U8(kRdmaVersion);
  w.U64(m.lease_id);
  return w.Take();
}

Result<RdmaHello> DecodeRdmaHello(std::span<const std::byte> body) {
  Reader r(body);
  KVTIER_RETURN_IF_ERROR(ReadVersion(r, "RDMA_HELLO"));
  RdmaHello m{GetQp(r)};
  KVTIER_RETURN_IF_ERROR(r.Done("RDMA_HELLO"));
  KVTIER_RETURN_IF_ERROR(CheckQp(m.qp, "RDMA_HELLO"));
  return m;
}

Result<RdmaReady> DecodeRdmaReady(std::span<const std::byte> body) {
  Reader r(body);
  KVTIER_RETURN_IF_ERROR(ReadVersion(r, "RDMA_READY"));
  RdmaReady m;
  m.qp = GetQp(r);
  m.pool.addr = r.U64();
  m.pool.bytes = r.U64();
  m.pool.rkey = r.U32();
  m.lease_ms = r.U32();
  KVTIER_RETURN_IF_ERROR(r.Done("RDMA_READY"));
  KVTIER_RETURN_IF_ERROR(CheckQp(m.qp, "RDMA_READY"));
  if (m.pool.bytes == 0 || m.pool.addr + m.pool.bytes < m.pool.addr) {
    return Status::InvalidArgument("RDMA_READY: the pool region is empty or wraps around");
  }
  if (m.lease_ms == 0 || m.lease_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("RDMA_READY: lease of " + std::to_string(m.lease_ms) +
                                   " ms is outside 1.." + std::to_string(kMaxLeaseMs));
  }
  return m;
}

Result<GrantList> DecodeGrantList(std::span<const std::byte> body) {
  Reader r(body);
  KVTIER_RETURN_IF_ERROR(ReadVersion(r, "PUT_GRANT"));
  GrantList m;
  KVTIER_RETURN_IF_ERROR(GetSlots(r, &m.items, "PUT_GRANT"));
  KVTIER_RETURN_IF_ERROR(r.Done("PUT_GRANT"));
  return m;
}

Result<LeaseReply> DecodeLeaseReply(std::span<const std::byte> body) {
  Reader r(body);
  KVTIER_RETURN_IF_ERROR(ReadVersion(r, "LEASE_REPLY"));
  LeaseReply m;
  m.lease_id = r.U64();
  KVTIER_RETURN_IF_ERROR(GetSlots(r, &m.items, "LEASE_REPLY"));
  KVTIER_RETURN_IF_ERROR(r.Done("LEASE_REPLY"));
  return m;
}

Result<LeaseRelease> DecodeLeaseRelease(std::span<const std::byte> body) {
  Reader r(body);
  KVTIER_RETURN_IF_ERROR(ReadVersion(r, "LEASE_RELEASE"));
  LeaseRelease m{r.U64()};
  KVTIER_RETURN_IF_ERROR(r.Done("LEASE_RELEASE"));
  if (m.lease_id == 0) return Status::InvalidArgument("LEASE_RELEASE: lease id 0");
  return m;
}

Status CheckGrant(const RdmaRegion& region, const RemoteSlot& slot, uint64_t expected_bytes) {
  if (slot.code != StatusCode::kOk) return Status::Ok();
  if (slot.bytes != expected_bytes) {
    return Status::InvalidArgument("grant of " + std::to_string(slot.bytes) +
                                   " bytes for a block of " + std::to_string(expected_bytes));
  }
  return InRegion(region, slot, "grant");
}

Status CheckLease(const RdmaRegion& region, const RemoteSlot& slot, uint64_t max_bytes) {
  if (slot.code != StatusCode::kOk) return Status::Ok();
  if (slot.bytes <= kBlockHeaderBytes || slot.bytes > max_bytes) {
    return Status::InvalidArgument("leased block of " + std::to_string(slot.bytes) +
                                   " bytes does not fit 65.." + std::to_string(max_bytes));
  }
  return InRegion(region, slot, "lease");
}

}  // namespace kvtier::internal::memd
