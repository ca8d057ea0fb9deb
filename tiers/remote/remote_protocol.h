// The kvtier-memd wire protocol: versioned, length-prefixed binary frames over
// one TCP connection. Pure encoding and decoding, no sockets, so the server,
// the client and the fuzz target share one decoder.
//
// Every frame starts with a 16-byte header (little-endian):
//   0 u32 magic "KVRM"   4 u8 version   5 u8 opcode   6 u16 item
//   8 u32 request id    12 u32 body bytes
// `item` names one element of a batch (PUT_DATA, GET_DATA, GET_STATUS) and is
// 0 elsewhere. A connection opens with the handshake
//   client HELLO(version, client nonce) -> server CHALLENGE(server nonce,
//   instance id) -> client AUTH(HMAC) -> server WELCOME(HMAC, pool shape)
// in which both sides prove they hold the shared secret without sending it.
// Then the client sends requests; every request id gets replies with that id:
//   PUT_BEGIN(ns, [key, payload bytes]) -> BEGIN_REPLY(statuses)
//   PUT_DATA(item) body = stored block (BlockHeader + payload), no reply
//   PUT_COMMIT -> STATUS_REPLY(statuses)    (same request id as PUT_BEGIN)
//   GET(ns, keys) -> per key GET_DATA(item, stored block) or GET_STATUS(item, code)
//   EXISTS / REMOVE(ns, keys) -> STATUS_REPLY(statuses)
//   STATS -> STATS_REPLY (pool totals and at most kMaxStatsNamespaces
//            namespaces: the largest by bytes)
// On a connection that switched to RDMA (RDMA_HELLO -> RDMA_READY, see
// rdma_protocol.h) PUT_BEGIN is answered by PUT_GRANT and no PUT_DATA
// follows, and blocks are read with GET_LEASE -> LEASE_REPLY, LEASE_RELEASE.
// A malformed frame is answered with ERROR(code, text) and the connection is
// closed; nothing a client sends is used as an offset or a length without a
// bound check.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_header.h"
#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::internal::memd {

inline constexpr uint32_t kFrameMagic = 0x4D52564B;  // "KVRM" read as little-endian
inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
// Items in one PUT_BEGIN, GET, EXISTS or REMOVE.
inline constexpr uint32_t kMaxBatchItems = 4096;
// Bound on every body that is not block data (a full batch of PUT_BEGIN
// items is 8 + 4 + 4096 * 24 bytes).
inline constexpr uint32_t kMaxControlBodyBytes = 128 * 1024;
inline constexpr uint32_t kMaxErrorTextBytes = 1024;
// PUT_BEGIN items one connection may have begun and not yet seen answered
// by STATUS_REPLY (TCP and RDMA together): four full batches. The server
// refuses every item of a put that would go past it (ResourceExhausted);
// over RDMA, where puts are pipelined, the client holds further puts back
// until committed ones make room (over TCP one put is open at a time).
inline constexpr size_t kMaxBegunPutItems = 4 * kMaxBatchItems;
// Namespaces one STATS_REPLY lists: as many as fit kMaxControlBodyBytes (36
// bytes of totals, then 24 a namespace). A pool holding more lists only the
// largest by bytes; its totals still count every block, and the format has
// no room to say how many namespaces were left out.
inline constexpr uint32_t kMaxStatsNamespaces = (kMaxControlBodyBytes - 36) / 24;
// The slowest a connection may move block bytes and still have both ends
// wait for them past their timeouts: far below any network a block store
// runs on, and still seconds, not hours, for a batch of large blocks.
inline constexpr uint64_t kFloorBytesPerSecond = uint64_t{4} << 20;

enum class Opcode : uint8_t {
  kHello = 1,
  kChallenge = 2,
  kAuth = 3,
  kWelcome = 4,
  kError = 5,
  kPutBegin = 10,
  kBeginReply = 11,
  kPutData = 12,
  kPutCommit = 13,
  kStatusReply = 14,
  kGet = 20,
  kGetData = 21,
  kGetStatus = 22,
  kExists = 30,
  kRemove = 31,
  kStats = 40,
  kStatsReply = 41,
  // RDMA data path (rdma_protocol.h).
  kRdmaHello = 50,
  kRdmaReady = 51,
  kPutGrant = 52,
  kGetLease = 53,
  kLeaseReply = 54,
  kLeaseRelease = 55,
};

struct FrameHeader {
  Opcode opcode = Opcode::kError;
  uint16_t item = 0;
  uint32_t request_id = 0;
  uint32_t body_bytes = 0;
};

using FrameHeaderBytes = std::array<std::byte, kFrameHeaderBytes>;

FrameHeaderBytes EncodeFrameHeader(const FrameHeader& h);
// Checks magic, version and opcode, and that the body fits the opcode's
// bound: `max_block_bytes` (a stored block, header included) for PUT_DATA and
// GET_DATA, kMaxControlBodyBytes for the rest. InvalidArgument with the reason.
Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte> bytes, uint64_t max_block_bytes);

// Status codes travel as one byte (StatusCode's value); unknown values decode
// as Internal.
uint8_t EncodeCode(StatusCode code);
StatusCode DecodeCode(uint8_t byte);

struct Hello {
  uint32_t version = kProtocolVersion;
  std::array<std::byte, kNonceBytes> nonce{};
};
struct Challenge {
  std::array<std::byte, kNonceBytes> nonce{};
  uint64_t instance_id = 0;  // random per server start: a restart is visible
};
struct Auth {
  std::array<std::byte, kMacBytes> mac{};
};
struct Welcome {
  std::array<std::byte, kMacBytes> mac{};
  uint64_t slot_bytes = 0;  // largest stored block (BlockHeader + payload)
  uint64_t slot_count = 0;
};
struct ErrorReply {
  StatusCode code = StatusCode::kInternal;
  std::string text;
};
struct PutItem {
  BlockKey key;
  uint64_t payload_bytes = 0;
};
struct PutBegin {
  NamespaceId ns;
  std::vector<PutItem> items;
};
// GET, EXISTS and REMOVE.
struct KeyBatch {
  NamespaceId ns;
  std::vector<BlockKey> keys;
};
struct StatusList {
  std::vector<StatusCode> codes;
};
struct NamespaceUsage {
  uint64_t ns = 0;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
};
struct Stats {
  uint64_t slot_bytes = 0;
  uint64_t slot_count = 0;
  uint64_t used_slots = 0;
  uint64_t evictions = 0;
  std::vector<NamespaceUsage> namespaces;
};

// Body encoders return the body only; the caller frames it. A Stats body
// keeps the kMaxStatsNamespaces largest namespaces, so it always fits.
std::vector<std::byte> EncodeBody(const Hello& m);
std::vector<std::byte> EncodeBody(const Challenge& m);
std::vector<std::byte> EncodeBody(const Auth& m);
std::vector<std::byte> EncodeBody(const Welcome& m);
std::vector<std::byte> EncodeBody(const ErrorReply& m);
std::vector<std::byte> EncodeBody(const PutBegin& m);
std::vector<std::byte> EncodeBody(const KeyBatch& m);
std::vector<std::byte> EncodeBody(const StatusList& m);
std::vector<std::byte> EncodeBody(const Stats& m);

// Body decoders: the body must be exactly the encoded size, counts must be
// 1..kMaxBatchItems (namespaces in Stats: up to 65536), payload sizes 1..
// kMaxBlockPayloadBytes. InvalidArgument naming the field otherwise.
Result<Hello> DecodeHello(std::span<const std::byte> body);
Result<Challenge> DecodeChallenge(std::span<const std::byte> body);
Result<Auth> DecodeAuth(std::span<const std::byte> body);
Result<Welcome> DecodeWelcome(std::span<const std::byte> body);
Result<ErrorReply> DecodeError(std::span<const std::byte> body);
Result<PutBegin> DecodePutBegin(std::span<const std::byte> body);
Result<KeyBatch> DecodeKeyBatch(std::span<const std::byte> body);
Result<StatusList> DecodeStatusList(std::span<const std::byte> body);
Result<Stats> DecodeStats(std::span<const std::byte> body);

// A header followed by its body, ready to send.
std::vector<std::byte> Frame(Opcode op, uint32_t request_id, std::span<const std::byte> body,
                             uint16_t item = 0);

// Decodes a whole client-to-server frame (header and body) the way the server
// does, for tests and the fuzz target: OK when the server would accept it.
Status CheckClientFrame(std::span<const std::byte> frame, uint64_t max_block_bytes);

}  // namespace kvtier::internal::memd
