#include "kvtier/block_header.h"

#include <xxhash.h>

#include <string>

#include "core/byte_writer.h"
#include "core/payload_hash.h"

namespace kvtier {
namespace {

using internal::LoadLe;
using internal::StoreLe;

constexpr size_t kHeaderChecksumOffset = 48;

uint64_t HeaderChecksum(const std::byte* p) { return XXH3_64bits(p, kHeaderChecksumOffset); }

std::string Hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint64_t PayloadChecksum(ChecksumKind kind, std::span<const std::byte> payload) {
  (void)kind;  // one kind today; the field lets a later format add CRC32C
  return internal::PayloadXxh3(payload.data(), payload.size());
}

BlockHeader MakeBlockHeader(NamespaceId ns, const BlockKey& key,
                            std::span<const std::byte> payload) {
  return MakeBlockHeader(ns, key, payload, std::nullopt);
}

BlockHeader MakeBlockHeader(NamespaceId ns, const BlockKey& key,
                            std::span<const std::byte> payload, std::optional<uint64_t> known) {
  BlockHeader h;
  h.ns = ns;
  h.key = key;
  h.payload_bytes = payload.size();
  h.payload_checksum = known ? *known : PayloadChecksum(h.checksum_kind, payload);
  return h;
}

void EncodeBlockHeader(const BlockHeader& h, std::span<std::byte> out) {
  std::byte* p = out.data();
  StoreLe(p + 0, kBlockMagic, 4);
  StoreLe(p + 4, h.version, 2);
  StoreLe(p + 6, static_cast<uint8_t>(h.checksum_kind), 1);
  StoreLe(p + 7, 0, 1);
  StoreLe(p + 8, h.ns.value, 8);
  StoreLe(p + 16, h.key.hi, 8);
  StoreLe(p + 24, h.key.lo, 8);
  StoreLe(p + 32, h.payload_bytes, 8);
  StoreLe(p + 40, h.payload_checksum, 8);
  StoreLe(p + 48, HeaderChecksum(p), 8);
  StoreLe(p + 56, 0, 8);
}

Result<BlockHeader> DecodeBlockHeader(std::span<const std::byte> bytes) {
  if (bytes.size() < kBlockHeaderBytes) {
    return Status::InvalidArgument("block header: need " + std::to_string(kBlockHeaderBytes) +
                                   " bytes, got " + std::to_string(bytes.size()));
  }
  const std::byte* p = bytes.data();
  uint32_t magic = static_cast<uint32_t>(LoadLe(p, 4));
  if (magic != kBlockMagic) return Status::Corruption("block header: bad magic " + Hex64(magic));
  BlockHeader h;
  h.version = static_cast<uint16_t>(LoadLe(p + 4, 2));
  if (h.version != kBlockFormatVersion) {
    return Status::Corruption("block header: unsupported format version " +
                              std::to_string(h.version) + " (this build reads " +
                              std::to_string(kBlockFormatVersion) + ")");
  }
  auto kind = static_cast<uint8_t>(LoadLe(p + 6, 1));
  if (kind != static_cast<uint8_t>(ChecksumKind::kXxh3_64)) {
    return Status::Corruption("block header: unknown checksum kind " + std::to_string(kind));
  }
  h.checksum_kind = static_cast<ChecksumKind>(kind);
  if (LoadLe(p + 7, 1) != 0 || LoadLe(p + 56, 8) != 0) {
    return Status::Corruption("block header: reserved bytes are not zero");
  }
  uint64_t stored = LoadLe(p + kHeaderChecksumOffset, 8);
  if (stored != HeaderChecksum(p)) {
    return Status::Corruption("block header: header checksum mismatch (stored " + Hex64(stored) +
                              ", computed " + Hex64(HeaderChecksum(p)) + ")");
  }
  h.ns.value = LoadLe(p + 8, 8);
  h.key.hi = LoadLe(p + 16, 8);
  h.key.lo = LoadLe(p + 24, 8);
  h.payload_bytes = LoadLe(p + 32, 8);
  h.payload_checksum = LoadLe(p + 40, 8);
  if (h.payload_bytes > kMaxBlockPayloadBytes) {
    return Status::Corruption("block header: payload length " + std::to_string(h.payload_bytes) +
                              " exceeds the " + std::to_string(kMaxBlockPayloadBytes) +
                              "-byte limit");
  }
  return h;
}

Status VerifyBlockOwner(const BlockHeader& h, NamespaceId ns, const BlockKey& key) {
  if (h.ns != ns) {
    return Status::Corruption("block header: namespace " + Hex64(h.ns.value) + " != expected " +
                              Hex64(ns.value));
  }
  if (h.key != key) {
    return Status::Corruption("block header: key " + ToHex(h.key) + " != expected " + ToHex(key));
  }
  return Status::Ok();
}

Status VerifyBlock(const BlockHeader& h, NamespaceId ns, const BlockKey& key,
                   std::span<const std::byte> payload) {
  KVTIER_RETURN_IF_ERROR(VerifyBlockOwner(h, ns, key));
  if (h.payload_bytes != payload.size()) {
    return Status::Corruption("block payload: length " + std::to_string(payload.size()) +
                              " != header's " + std::to_string(h.payload_bytes));
  }
  if (PayloadChecksum(h.checksum_kind, payload) != h.payload_checksum) {
    return Status::Corruption("block payload: checksum mismatch for key " + ToHex(key));
  }
  return Status::Ok();
}

}  // namespace kvtier
