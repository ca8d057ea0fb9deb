#include "tiers/nvme/nvme_format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

namespace kvtier::internal {
namespace {

void PutBe(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetBe(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

constexpr std::string_view kMetaMagic = "kvtier-nvme";

}  // namespace

AlignedBuffer::AlignedBuffer(uint64_t bytes) : size_(bytes) {
  const uint64_t n = AlignUp(bytes == 0 ? 1 : bytes);
  void* p = std::aligned_alloc(kNvmeAlign, n);
  if (p == nullptr) throw std::bad_alloc();  // as operator new would
  std::memset(p, 0, n);
  data_.reset(static_cast<std::byte*>(p));
}

bool LocationFits(const BlockLocation& loc, uint64_t block_bytes, uint64_t region_bytes,
                  uint64_t regions) {
  // Payload first: DiskBytes of a payload near 2^64 wraps.
  return loc.region < regions && loc.offset % kNvmeAlign == 0 && loc.payload_bytes > 0 &&
         loc.payload_bytes <= block_bytes && loc.payload_bytes <= region_bytes &&
         loc.offset + DiskBytes(loc.payload_bytes) <= region_bytes;
}

Status CheckStoreMeta(const StoreMeta& m) {
  auto bad = [](const std::string& what) { return Status::Corruption("nvme store meta: " + what); };
  if (m.region_bytes == 0 || m.region_bytes % kNvmeAlign != 0 || m.region_bytes > (1ULL << 31)) {
    return bad("region size " + std::to_string(m.region_bytes) +
               " is not a multiple of 4 KiB of at most 2 GiB");
  }
  if (m.block_bytes == 0 || m.block_bytes > m.region_bytes ||
      DiskBytes(m.block_bytes) > m.region_bytes) {
    return bad("block size " + std::to_string(m.block_bytes) + " does not fit a region of " +
               std::to_string(m.region_bytes) + " bytes");
  }
  if (m.regions == 0 || m.regions > kMaxNvmeRegions) {
    return bad(std::to_string(m.regions) + " regions (at most " + std::to_string(kMaxNvmeRegions) +
               ")");
  }
  return Status::Ok();
}

std::string EncodeMeta(const StoreMeta& m) {
  std::string s(kMetaMagic);
  PutBe(s, m.format_version, 4);
  PutBe(s, m.block_bytes, 8);
  PutBe(s, m.region_bytes, 8);
  PutBe(s, m.regions, 4);
  PutBe(s, m.namespace_id, 8);
  return s;
}

std::optional<StoreMeta> DecodeMeta(std::string_view s) {
  // 24 bytes of fields; 32 since the namespace is recorded.
  const size_t body = s.size() - std::min(s.size(), kMetaMagic.size());
  if ((body != 24 && body != 32) || s.substr(0, kMetaMagic.size()) != kMetaMagic) {
    return std::nullopt;
  }
  size_t at = kMetaMagic.size();
  StoreMeta m;
  m.format_version = static_cast<uint32_t>(GetBe(s, at, 4));
  m.block_bytes = GetBe(s, at + 4, 8);
  m.region_bytes = GetBe(s, at + 12, 8);
  m.regions = static_cast<uint32_t>(GetBe(s, at + 20, 4));
  if (body == 32) m.namespace_id = GetBe(s, at + 24, 8);
  return m;
}

std::string DescribeMismatch(const StoreMeta& stored, const StoreMeta& wanted) {
  auto diff = [](const char* what, uint64_t a, uint64_t b) {
    return std::string(what) + " " + std::to_string(a) + " != " + std::to_string(b);
  };
  if (stored.format_version != wanted.format_version) {
    return diff("format version", stored.format_version, wanted.format_version);
  }
  if (stored.block_bytes != wanted.block_bytes) {
    return diff("block size", stored.block_bytes, wanted.block_bytes);
  }
  if (stored.region_bytes != wanted.region_bytes) {
    return diff("region size", stored.region_bytes, wanted.region_bytes);
  }
  if (stored.regions != wanted.regions) {
    // The count follows from the capacity and the region size: the
    // capacity changed. The file's size counts headers and spare regions too.
    return diff("region count", stored.regions, wanted.regions) + ", data file size " +
           std::to_string(stored.regions * stored.region_bytes) +
           " != " + std::to_string(wanted.regions * wanted.region_bytes) + " bytes";
  }
  char hex[64];
  std::snprintf(hex, sizeof(hex), "namespace 0x%016llx != 0x%016llx",
                static_cast<unsigned long long>(stored.namespace_id),
                static_cast<unsigned long long>(wanted.namespace_id));
  return hex;
}

Result<BlockHeader> HeaderMatching(std::span<const std::byte> page, const NsKey& id,
                                   const BlockLocation& loc) {
  KVTIER_ASSIGN_OR_RETURN(BlockHeader h, DecodeBlockHeader(page.first(kBlockHeaderBytes)));
  if (h.payload_checksum != loc.checksum || h.payload_bytes != loc.payload_bytes) {
    return Status::Corruption("header does not match the index entry");
  }
  KVTIER_RETURN_IF_ERROR(VerifyBlockOwner(h, id.ns, id.key));
  return h;
}

std::string RegionRecordKey(uint32_t region) {
  std::string s = "R";
  PutBe(s, region, 4);
  return s;
}

std::optional<uint32_t> DecodeRegionRecordKey(std::string_view k) {
  if (k.size() != 5 || k[0] != 'R') return std::nullopt;
  return static_cast<uint32_t>(GetBe(k, 1, 4));
}

std::string BlockRecordKey(const NsKey& id) {
  std::string s = "B";
  PutBe(s, id.ns.value, 8);
  PutBe(s, id.key.hi, 8);
  PutBe(s, id.key.lo, 8);
  return s;
}

std::optional<NsKey> DecodeBlockRecordKey(std::string_view k) {
  if (k.size() != 25 || k[0] != 'B') return std::nullopt;
  return NsKey{NamespaceId{GetBe(k, 1, 8)}, BlockKey{GetBe(k, 9, 8), GetBe(k, 17, 8)}};
}

std::string EncodeU64(uint64_t v) {
  std::string s;
  PutBe(s, v, 8);
  return s;
}

std::optional<uint64_t> DecodeU64(std::string_view s) {
  if (s.size() != 8) return std::nullopt;
  return GetBe(s, 0, 8);
}

std::string EncodeLocation(const BlockLocation& loc) {
  std::string s;
  PutBe(s, loc.region, 4);
  PutBe(s, loc.offset, 4);
  PutBe(s, loc.payload_bytes, 8);
  PutBe(s, loc.checksum, 8);
  PutBe(s, loc.generation, 8);
  return s;
}

std::optional<BlockLocation> DecodeLocation(std::string_view s) {
  if (s.size() != 32) return std::nullopt;
  return BlockLocation{static_cast<uint32_t>(GetBe(s, 0, 4)), static_cast<uint32_t>(GetBe(s, 4, 4)),
                       GetBe(s, 8, 8), GetBe(s, 16, 8), GetBe(s, 24, 8)};
}

}  // namespace kvtier::internal
