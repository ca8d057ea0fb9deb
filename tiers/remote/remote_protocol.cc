#include "tiers/remote/remote_protocol.h"

#include <algorithm>
#include <cstring>

#include "tiers/remote/rdma_protocol.h"
#include "tiers/remote/wire_codec.h"

namespace kvtier::internal::memd {
namespace {

using wire::Reader;
using wire::Writer;

bool KnownOpcode(uint8_t op) {
  switch (static_cast<Opcode>(op)) {
    case Opcode::kHello:
    case Opcode::kChallenge:
    case Opcode::kAuth:
    case Opcode::kWelcome:
    case Opcode::kError:
    case Opcode::kPutBegin:
    case Opcode::kBeginReply:
    case Opcode::kPutData:
    case Opcode::kPutCommit:
    case Opcode::kStatusReply:
    case Opcode::kGet:
    case Opcode::kGetData:
    case Opcode::kGetStatus:
    case Opcode::kExists:
    case Opcode::kRemove:
    case Opcode::kStats:
    case Opcode::kStatsReply:
    case Opcode::kRdmaHello:
    case Opcode::kRdmaReady:
    case Opcode::kPutGrant:
    case Opcode::kGetLease:
    case Opcode::kLeaseReply:
    case Opcode::kLeaseRelease:
      return true;
  }
  return false;
}

Status CheckCount(uint32_t n, uint32_t max, const char* what) {
  if (n == 0 || n > max) {
    return Status::InvalidArgument(std::string(what) + " count " + std::to_string(n) +
                                   " is outside 1.." + std::to_string(max));
  }
  return Status::Ok();
}

}  // namespace

FrameHeaderBytes EncodeFrameHeader(const FrameHeader& h) {
  Writer w;
  w.U32(kFrameMagic);
  w.U8(kProtocolVersion);
  w.U8(static_cast<uint8_t>(h.opcode));
  w.U16(h.item);
  w.U32(h.request_id);
  w.U32(h.body_bytes);
  std::vector<std::byte> v = w.Take();
  FrameHeaderBytes out;
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte> bytes, uint64_t max_block_bytes) {
  if (bytes.size() != kFrameHeaderBytes) {
    return Status::InvalidArgument("frame header is " + std::to_string(bytes.size()) +
                                   " bytes; expected 16");
  }
  Reader r(bytes);
  const uint32_t magic = r.U32();
  const uint8_t version = r.U8();
  const uint8_t op = r.U8();
  FrameHeader h;
  h.item = r.U16();
  h.request_id = r.U32();
  h.body_bytes = r.U32();
  if (magic != kFrameMagic) return Status::InvalidArgument("bad frame magic");
  if (version != kProtocolVersion) {
    return Status::InvalidArgument("protocol version " + std::to_string(version) +
                                   " is not supported; expected 1");
  }
  if (!KnownOpcode(op)) return Status::InvalidArgument("unknown opcode " + std::to_string(op));
  h.opcode = static_cast<Opcode>(op);
  const bool block = h.opcode == Opcode::kPutData || h.opcode == Opcode::kGetData;
  const uint64_t cap = block ? max_block_bytes : kMaxControlBodyBytes;
  if (h.body_bytes > cap) {
    return Status::InvalidArgument("frame body of " + std::to_string(h.body_bytes) +
                                   " bytes exceeds the limit of " + std::to_string(cap));
  }
  if (block && h.body_bytes <= kBlockHeaderBytes) {
    return Status::InvalidArgument("block frame of " + std::to_string(h.body_bytes) +
                                   " bytes holds no payload");
  }
  if (!block && h.opcode != Opcode::kGetStatus && h.item != 0) {
    return Status::InvalidArgument("item index on a non-item frame");
  }
  return h;
}

uint8_t EncodeCode(StatusCode code) { return static_cast<uint8_t>(code); }

StatusCode DecodeCode(uint8_t byte) {
  if (byte > static_cast<uint8_t>(StatusCode::kInternal)) return StatusCode::kInternal;
  return static_cast<StatusCode>(byte);
}

std::vector<std::byte> EncodeBody(const Hello& m) {
  Writer w;
  w.U32(m.version);
  w.Bytes(m.nonce);
  return w.Take();
}
std::vector<std::byte> EncodeBody(const Challenge& m) {
  Writer w;
  w.Bytes(m.nonce);
  w.U64(m.instance_id);
  return w.Take();
}
std::vector<std::byte> EncodeBody(const Auth& m) {
  Writer w;
  w.Bytes(m.mac);
  return w.Take();
}
std::vector<std::byte> EncodeBody(const Welcome& m) {
  Writer w;
  w.Bytes(m.mac);
  w.U64(m.slot_bytes);
  w.U64(m.slot_count);
  return w.Take();
}
std::vector<std::byte> EncodeBody(const ErrorReply& m) {
  Writer w;
  const size_t n = std::min<size_t>(m.text.size(), kMaxErrorTextBytes);
  w.U8(EncodeCode(m.code));
  w.U16(static_cast<uint16_t>(n));
  w.Bytes(std::as_bytes(std::span(m.text.data(), n)));
  return w.Take();
}
std::vector<std::byte> EncodeBody(const PutBegin& m) {
  Writer w;
  w.U64(m.ns.value);
  w.U32(static_cast<uint32_t>(m.items.size()));
  for (const PutItem& it : m.items) {
    w.Key(it.key);
    w.U64(it.payload_bytes);
  }
  return w.Take();
}
std::vector<std::byte> EncodeBody(const KeyBatch& m) {
  Writer w;
  w.U64(m.ns.value);
  w.U32(static_cast<uint32_t>(m.keys.size()));
  for (const BlockKey& k : m.keys) w.Key(k);
  return w.Take();
}
std::vector<std::byte> EncodeBody(const StatusList& m) {
  Writer w;
  w.U32(static_cast<uint32_t>(m.codes.size()));
  for (StatusCode c : m.codes) w.U8(EncodeCode(c));
  return w.Take();
}
std::vector<std::byte> EncodeBody(const Stats& m) {
  Writer w;
  w.U64(m.slot_bytes);
  w.U64(m.slot_count);
  w.U64(m.used_slots);
  w.U64(m.evictions);
  std::span<const NamespaceUsage> listed = m.namespaces;
  std::vector<NamespaceUsage> largest;
  if (listed.size() > kMaxStatsNamespaces) {
    largest.resize(kMaxStatsNamespaces);
    std::partial_sort_copy(listed.begin(), listed.end(), largest.begin(), largest.end(),
                           [](const NamespaceUsage& a, const NamespaceUsage& b) {
                             return a.bytes != b.bytes ? a.bytes > b.bytes : a.ns < b.ns;
                           });
    listed = largest;
  }
  w.U32(static_cast<uint32_t>(listed.size()));
  for (const NamespaceUsage& u : listed) {
    w.U64(u.ns);
    w.U64(u.blocks);
    w.U64(u.bytes);
  }
  return w.Take();
}

Result<Hello> DecodeHello(std::span<const std::byte> body) {
  Reader r(body);
  Hello m;
  m.version = r.U32();
  r.Bytes(&m.nonce);
  KVTIER_RETURN_IF_ERROR(r.Done("HELLO"));
  if (m.version != kProtocolVersion) {
    return Status::InvalidArgument("client protocol version " + std::to_string(m.version) +
                                   " is not supported; expected 1");
  }
  return m;
}
Result<Challenge> DecodeChallenge(std::span<const std::byte> body) {
  Reader r(body);
  Challenge m;
  r.Bytes(&m.nonce);
  m.instance_id = r.U64();
  KVTIER_RETURN_IF_ERROR(r.Done("CHALLENGE"));
  return m;
}
Result<Auth> DecodeAuth(std::span<const std::byte> body) {
  Reader r(body);
  Auth m;
  r.Bytes(&m.mac);
  KVTIER_RETURN_IF_ERROR(r.Done("AUTH"));
  return m;
}
Result<Welcome> DecodeWelcome(std::span<const std::byte> body) {
  Reader r(body);
  Welcome m;
  r.Bytes(&m.mac);
  m.slot_bytes = r.U64();
  m.slot_count = r.U64();
  KVTIER_RETURN_IF_ERROR(r.Done("WELCOME"));
  if (m.slot_bytes <= kBlockHeaderBytes || m.slot_count == 0) {
    return Status::InvalidArgument("WELCOME announces an empty pool");
  }
  return m;
}
Result<ErrorReply> DecodeError(std::span<const std::byte> body) {
  Reader r(body);
  ErrorReply m;
  m.code = DecodeCode(r.U8());
  const uint16_t n = r.U16();
  if (n > kMaxErrorTextBytes) return Status::InvalidArgument("ERROR text is too long");
  m.text = r.Text(n);
  KVTIER_RETURN_IF_ERROR(r.Done("ERROR"));
  return m;
}
Result<PutBegin> DecodePutBegin(std::span<const std::byte> body) {
  Reader r(body);
  PutBegin m;
  m.ns.value = r.U64();
  const uint32_t n = r.U32();
  if (body.size() < 12) return Status::InvalidArgument("PUT_BEGIN body is truncated");
  KVTIER_RETURN_IF_ERROR(CheckCount(n, kMaxBatchItems, "PUT_BEGIN item"));
  if (r.remaining() != static_cast<size_t>(n) * 24) {
    return Status::InvalidArgument("PUT_BEGIN body does not hold " + std::to_string(n) + " items");
  }
  m.items.resize(n);
  for (PutItem& it : m.items) {
    it.key = r.Key();
    it.payload_bytes = r.U64();
    if (it.payload_bytes == 0 || it.payload_bytes > kMaxBlockPayloadBytes) {
      return Status::InvalidArgument("PUT_BEGIN payload size " + std::to_string(it.payload_bytes) +
                                     " is outside 1.." + std::to_string(kMaxBlockPayloadBytes));
    }
  }
  KVTIER_RETURN_IF_ERROR(r.Done("PUT_BEGIN"));
  return m;
}
Result<KeyBatch> DecodeKeyBatch(std::span<const std::byte> body) {
  Reader r(body);
  KeyBatch m;
  m.ns.value = r.U64();
  const uint32_t n = r.U32();
  if (body.size() < 12) return Status::InvalidArgument("key batch body is truncated");
  KVTIER_RETURN_IF_ERROR(CheckCount(n, kMaxBatchItems, "key batch"));
  if (r.remaining() != static_cast<size_t>(n) * 16) {
    return Status::InvalidArgument("key batch body does not hold " + std::to_string(n) + " keys");
  }
  m.keys.resize(n);
  for (BlockKey& k : m.keys) k = r.Key();
  KVTIER_RETURN_IF_ERROR(r.Done("key batch"));
  return m;
}
Result<StatusList> DecodeStatusList(std::span<const std::byte> body) {
  Reader r(body);
  const uint32_t n = r.U32();
  if (body.size() < 4) return Status::InvalidArgument("status list is truncated");
  KVTIER_RETURN_IF_ERROR(CheckCount(n, kMaxBatchItems, "status"));
  if (r.remaining() != n) return Status::InvalidArgument("status list is truncated");
  StatusList m;
  m.codes.resize(n);
  for (StatusCode& c : m.codes) c = DecodeCode(r.U8());
  KVTIER_RETURN_IF_ERROR(r.Done("STATUS"));
  return m;
}
Result<Stats> DecodeStats(std::span<const std::byte> body) {
  Reader r(body);
  Stats m;
  m.slot_bytes = r.U64();
  m.slot_count = r.U64();
  m.used_slots = r.U64();
  m.evictions = r.U64();
  const uint32_t n = r.U32();
  if (n > 65536 || r.remaining() != static_cast<size_t>(n) * 24) {
    return Status::InvalidArgument("STATS namespace list is malformed");
  }
  m.namespaces.resize(n);
  for (NamespaceUsage& u : m.namespaces) {
    u.ns = r.U64();
    u.blocks = r.U64();
    u.bytes = r.U64();
  }
  KVTIER_RETURN_IF_ERROR(r.Done("STATS"));
  return m;
}

std::vector<std::byte> Frame(Opcode op, uint32_t request_id, std::span<const std::byte> body,
                             uint16_t item) {
  FrameHeaderBytes h =
      EncodeFrameHeader({op, item, request_id, static_cast<uint32_t>(body.size())});
  std::vector<std::byte> out(h.begin(), h.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Status CheckClientFrame(std::span<const std::byte> frame, uint64_t max_block_bytes) {
  if (frame.size() < kFrameHeaderBytes) return Status::InvalidArgument("frame is truncated");
  KVTIER_ASSIGN_OR_RETURN(FrameHeader h,
                          DecodeFrameHeader(frame.first(kFrameHeaderBytes), max_block_bytes));
  std::span<const std::byte> body = frame.subspan(kFrameHeaderBytes);
  if (body.size() != h.body_bytes) return Status::InvalidArgument("frame body is truncated");
  switch (h.opcode) {
    case Opcode::kHello:
      return DecodeHello(body).status();
    case Opcode::kAuth:
      return DecodeAuth(body).status();
    case Opcode::kPutBegin:
      return DecodePutBegin(body).status();
    case Opcode::kPutData:
      return Status::Ok();
    case Opcode::kPutCommit:
    case Opcode::kStats:
      return body.empty() ? Status::Ok() : Status::InvalidArgument("unexpected body");
    case Opcode::kGet:
    case Opcode::kExists:
    case Opcode::kRemove:
    case Opcode::kGetLease:
      return DecodeKeyBatch(body).status();
    case Opcode::kRdmaHello:
      return DecodeRdmaHello(body).status();
    case Opcode::kLeaseRelease:
      return DecodeLeaseRelease(body).status();
    default:
      return Status::InvalidArgument("opcode " + std::to_string(static_cast<int>(h.opcode)) +
                                     " is not a request");
  }
}

}  // namespace kvtier::internal::memd
