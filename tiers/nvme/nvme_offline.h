// NvmeOfflineStore: read-only access to an NVMe tier's store (data file and
// index) without opening the tier, for offline tools. It never writes to
// either, and it checks blocks exactly as the tier's read path does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kvtier/status.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_index.h"

namespace kvtier::internal {

class NvmeOfflineStore {
 public:
  // Opens the data file at `data_path` and the index at `index_dir` (empty:
  // data_path + ".index", the tier's default). Unless `ignore_lock`, takes a
  // shared lock on the data file and fails with Unavailable when a live tier
  // holds it; with `ignore_lock` the store may change while it is read.
  // NotFound when the data file or the index does not exist.
  static Result<std::unique_ptr<NvmeOfflineStore>> Open(const std::string& data_path,
                                                        const std::string& index_dir,
                                                        bool ignore_lock);
  ~NvmeOfflineStore();
  NvmeOfflineStore(const NvmeOfflineStore&) = delete;
  NvmeOfflineStore& operator=(const NvmeOfflineStore&) = delete;

  const StoreMeta& meta() const { return meta_; }
  const std::string& index_dir() const { return index_dir_; }
  // The data file's length when opened (a block device: UINT64_MAX). A block
  // that ends past it was cut off by a truncation; the tier drops it.
  uint64_t file_size() const { return file_size_; }
  bool Holds(const BlockLocation& loc) const {
    return FileOffset(loc) + DiskBytes(loc.payload_bytes) <= file_size_;
  }

  // Every region record and block entry of the index, in key order (see
  // NvmeIndex::Scan). Entries are reported as stored, stale ones included.
  Status Scan(const std::function<void(uint32_t region, uint64_t generation)>& on_region,
              const std::function<void(const NsKey&, const BlockLocation&)>& on_block,
              uint64_t* bad_records) const;

  // Lifetime write totals the tier recorded (zeros if none).
  Result<WriteTotals> Totals() const { return index_->ReadTotals(); }

  // Byte offset of the block's header page in the data file.
  uint64_t FileOffset(const BlockLocation& loc) const {
    return uint64_t{loc.region} * meta_.region_bytes + loc.offset;
  }
  // Reads the block at `loc` and checks its header and payload against `id`
  // and `loc`. Corruption with the reason on a mismatch; IOError when the
  // bytes cannot be read.
  Status VerifyBlock(const NsKey& id, const BlockLocation& loc) const;
  // Reads only the block's header page: Ok when it names `id` and the
  // payload length and checksum `loc` records. A cheap check that the index
  // describes this data file; Corruption or IOError as VerifyBlock.
  Status VerifyHeader(const NsKey& id, const BlockLocation& loc) const;

 private:
  NvmeOfflineStore(int fd, std::unique_ptr<NvmeIndex> index, StoreMeta meta, std::string dir);
  // Reads the first buf.size() bytes of the block at `loc`; Corruption when
  // `loc` lies outside the store.
  Status ReadAt(const BlockLocation& loc, AlignedBuffer& buf) const;
  int fd_ = -1;
  std::unique_ptr<NvmeIndex> index_;
  StoreMeta meta_;
  std::string index_dir_;
  uint64_t file_size_ = UINT64_MAX;
};

}  // namespace kvtier::internal
