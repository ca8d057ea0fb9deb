// The header every block carries once it leaves the host: on NVMe, in Redis, on
// a remote memory server. A reader checks it before handing any byte to the
// engine; a mismatch is a miss plus a Corruption count, never wrong data.
//
// Wire format (64 bytes, little-endian):
//   0  u32 magic "KVTB"      4  u16 version     6  u8 checksum kind  7  u8 0
//   8  u64 namespace id     16  u64 key.hi     24  u64 key.lo
//  32  u64 payload bytes    40  u64 payload checksum
//  48  u64 header checksum (XXH3-64 of bytes 0..47)   56  u64 reserved (0)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "kvtier/block_key.h"
#include "kvtier/export.h"
#include "kvtier/status.h"

namespace kvtier {

inline constexpr uint32_t kBlockMagic = 0x4254564B;  // "KVTB" read as little-endian
inline constexpr uint16_t kBlockFormatVersion = 1;
inline constexpr size_t kBlockHeaderBytes = 64;
// Blocks are 0.5-8 MiB in practice; anything past this is a corrupt length.
inline constexpr uint64_t kMaxBlockPayloadBytes = 1ULL << 30;

enum class ChecksumKind : uint8_t { kXxh3_64 = 1 };

struct BlockHeader {
  uint16_t version = kBlockFormatVersion;
  ChecksumKind checksum_kind = ChecksumKind::kXxh3_64;
  NamespaceId ns;
  BlockKey key;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
};

KVTIER_EXPORT uint64_t PayloadChecksum(ChecksumKind kind, std::span<const std::byte> payload);

// Builds the header of `payload` for (ns, key).
KVTIER_EXPORT BlockHeader MakeBlockHeader(NamespaceId ns, const BlockKey& key,
                                          std::span<const std::byte> payload);
// The same with the payload checksum already known (PayloadChecksum of
// `payload`, e.g. WriteOp::checksum): hashes only when `known` is empty.
KVTIER_EXPORT BlockHeader MakeBlockHeader(NamespaceId ns, const BlockKey& key,
                                          std::span<const std::byte> payload,
                                          std::optional<uint64_t> known);

// REQUIRES: out.size() >= kBlockHeaderBytes.
KVTIER_EXPORT void EncodeBlockHeader(const BlockHeader& header, std::span<std::byte> out);

// Parses and checks a header: length, magic, version, checksum kind, reserved
// bytes, header checksum and payload length bound. Every failure is
// Corruption (or InvalidArgument for a short buffer) with the reason.
KVTIER_EXPORT Result<BlockHeader> DecodeBlockHeader(std::span<const std::byte> bytes);

// Checks that `header` belongs to (ns, key): Corruption naming the namespace
// or key it holds otherwise. A reader that takes a value stored outside the
// process checks this before anything else it reads from the header.
KVTIER_EXPORT Status VerifyBlockOwner(const BlockHeader& header, NamespaceId ns,
                                      const BlockKey& key);

// Checks that `header` belongs to (ns, key) and that `payload` matches its
// length and checksum. Corruption with the reason otherwise.
KVTIER_EXPORT Status VerifyBlock(const BlockHeader& header, NamespaceId ns, const BlockKey& key,
                                 std::span<const std::byte> payload);

}  // namespace kvtier
