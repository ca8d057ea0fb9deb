// On-disk and in-index formats of the NVMe tier.
//
// A block on disk is one 4 KiB header page (the 64-byte BlockHeader, then
// zeros) followed by the payload padded to 4 KiB, so the payload starts on a
// 4 KiB boundary and an O_DIRECT read lands it straight in an aligned host
// slot. The data file is a row of equal regions; a block never spans two.
//
// The RocksDB index holds three kinds of records (big-endian keys, so a scan
// visits them grouped):
//   "M"                          -> StoreMeta
//   "R" u32 region               -> u64 generation of the region
//   "B" u64 ns u64 key.hi key.lo -> BlockLocation
// An entry is valid only while its generation equals its region's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/ns_key.h"
#include "kvtier/block_header.h"
#include "kvtier/status.h"

namespace kvtier::internal {

inline constexpr uint64_t kNvmeAlign = 4096;
inline constexpr uint32_t kNvmeFormatVersion = 1;

inline uint64_t AlignUp(uint64_t n) { return (n + kNvmeAlign - 1) / kNvmeAlign * kNvmeAlign; }
// Bytes a block of `payload_bytes` takes on disk: header page + padded payload.
inline uint64_t DiskBytes(uint64_t payload_bytes) { return kNvmeAlign + AlignUp(payload_bytes); }
inline bool IsAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kNvmeAlign == 0; }

// A zero-filled, 4 KiB-aligned heap buffer; move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(uint64_t bytes);
  std::byte* data() const { return data_.get(); }
  uint64_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_.get(), size_}; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  uint64_t size_ = 0;
};

struct BlockLocation {
  uint32_t region = 0;
  uint32_t offset = 0;  // bytes from the region start; 4 KiB-aligned
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;  // payload checksum, also in the on-disk header
  uint64_t generation = 0;
  friend bool operator==(const BlockLocation&, const BlockLocation&) = default;
};

struct StoreMeta {
  uint32_t format_version = kNvmeFormatVersion;
  uint64_t block_bytes = 0;
  uint64_t region_bytes = 0;
  uint32_t regions = 0;
  // The namespace the store serves (NvmeTierOptions::store_namespace); 0:
  // not bound to one. Stores written before it was recorded decode as 0.
  uint64_t namespace_id = 0;
  friend bool operator==(const StoreMeta&, const StoreMeta&) = default;
};

// The header at the start of `page` (a block's header page, or the block)
// decoded and checked against its index entry: the payload length and
// checksum `loc` records, and `id` as its owner. Corruption with the reason.
Result<BlockHeader> HeaderMatching(std::span<const std::byte> page, const NsKey& id,
                                   const BlockLocation& loc);

// The most regions a store may have: the tier keeps a record of each in
// memory (2^25 of 64 MiB hold 2 PiB), and the format counts them in 32 bits.
inline constexpr uint64_t kMaxNvmeRegions = uint64_t{1} << 25;
// Regions of a store for `capacity` bytes of blocks of `block_bytes` in
// regions of `region_bytes` (which hold at least one block each): the data's,
// plus spare ones so that reclaim always finds dead space to gain (about
// 1/16 extra) and a target to write into.
inline uint64_t NvmeRegionCount(uint64_t capacity, uint64_t block_bytes, uint64_t region_bytes) {
  const uint64_t blocks = capacity / block_bytes + (capacity % block_bytes != 0 ? 1 : 0);
  const uint64_t per_region = region_bytes / DiskBytes(block_bytes);
  const uint64_t data = blocks / per_region + (blocks % per_region != 0 ? 1 : 0);
  return data + 2 + data / 16;
}
// OK when a meta record read back describes a store this build could have
// written (block and region sizes, region count); Corruption naming the
// first value out of range otherwise, so that nothing is sized from it.
Status CheckStoreMeta(const StoreMeta& m);

// Whether `loc` lies inside a store of `regions` regions of `region_bytes`
// holding blocks of at most `block_bytes`: aligned, non-empty, within its
// region. The tier drops an index entry that does not fit.
bool LocationFits(const BlockLocation& loc, uint64_t block_bytes, uint64_t region_bytes,
                  uint64_t regions);

std::string EncodeMeta(const StoreMeta& m);
std::optional<StoreMeta> DecodeMeta(std::string_view s);
// Names the first field that differs ("block size 65536 != 131072",
// "namespace 0x00000000000000aa != 0x00000000000000bb").
std::string DescribeMismatch(const StoreMeta& stored, const StoreMeta& wanted);

std::string RegionRecordKey(uint32_t region);
std::optional<uint32_t> DecodeRegionRecordKey(std::string_view k);
std::string BlockRecordKey(const NsKey& id);
std::optional<NsKey> DecodeBlockRecordKey(std::string_view k);
std::string EncodeU64(uint64_t v);
std::optional<uint64_t> DecodeU64(std::string_view s);
std::string EncodeLocation(const BlockLocation& loc);
std::optional<BlockLocation> DecodeLocation(std::string_view s);

}  // namespace kvtier::internal
