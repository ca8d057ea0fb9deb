// NvmeIndex: the persistent key -> location index of the NVMe tier, in
// RocksDB. It only stores what the tier tells it; the ordering that makes it
// crash-safe (data durable before the entries that point at it, a region's
// new generation durable before new data lands in it) is the tier's job.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/status.h"
#include "tiers/nvme/nvme_format.h"

namespace rocksdb {
class DB;
class Env;
class WriteBatch;
}

namespace kvtier::internal {

// One pending change: a location to store, or nullopt to delete the key.
struct IndexUpdate {
  NsKey id;
  std::optional<BlockLocation> location;
};

// Lifetime write totals of a store, kept in the index so write
// amplification can be read offline and survives restarts.
struct WriteTotals {
  uint64_t host_bytes = 0;    // payload bytes admitted
  uint64_t device_bytes = 0;  // bytes written to the data file
};

// Block entries as read from the index.
using IndexEntries = std::vector<std::pair<NsKey, BlockLocation>>;

// Moves every entry of `kept` whose disk extent overlaps another's in the
// same region to `drops` (as a deletion), leaving `kept` sorted by region and
// offset. Normal operation never writes such entries (a damaged or foreign
// index can); which of them holds the bytes cannot be told, so none is kept.
// The tier's open and the offline tools both judge an index by it.
void DropOverlaps(IndexEntries& kept, std::vector<IndexUpdate>& drops);

// Whether an index describes its data file, judged from a few entries spread
// over `entries`: `read_header(id, loc)` checks one block's header page, or
// answers nullopt when it cannot be read (that proves nothing either way).
// `matched` when one passed; else how many failed and the first failure.
struct HeaderSample {
  bool matched = false;
  size_t failed = 0;
  Status first;
  // Every header read failed its check: the index is not this file's.
  bool Mismatched() const { return !matched && failed > 0; }
};
HeaderSample SampleHeaders(
    const IndexEntries& entries,
    const std::function<std::optional<Status>(const NsKey&, const BlockLocation&)>& read_header);

// What the tier found at its data path before the index was opened.
enum class DataFound {
  kCreated,  // a regular file made by this open, or empty: no block is in it
  kBlank,    // a block device reading as zeros where a store begins
  kData,     // a non-empty file, or a device holding bytes
};

class NvmeIndex {
 public:
  // Opens (creating if absent) the index at `dir`. A store whose meta
  // differs from `meta` is refused with InvalidArgument naming the
  // difference, or destroyed and recreated when `wipe_on_mismatch`.
  // An index found beside a data file created anew (DataFound::kCreated)
  // lists blocks that are gone: one that lists none is recreated, one that
  // lists some is refused unless `wipe_on_mismatch` (the data file missing
  // or empty may be a disk not mounted, or a device not found yet). No index beside kData (another
  // program's file, or a store whose index was deleted) is refused unless `wipe_on_mismatch`: the
  // tier would write over those bytes.
  // `*wiped` tells the caller that old data must be ignored. RocksDB's own
  // warnings go to `log` (may be null: dropped), never to a file on the
  // index's disk. `env` (tests: a file system that fails) replaces
  // RocksDB's default one; it must outlive the index.
  static Result<std::unique_ptr<NvmeIndex>> Open(const std::string& dir, const StoreMeta& meta,
                                                 bool wipe_on_mismatch, DataFound data,
                                                 const std::shared_ptr<LogSink>& log, bool* wiped,
                                                 rocksdb::Env* env = nullptr);
  // Deletes the index at `dir` (closed): a damaged one the tier wipes.
  static Status Destroy(const std::string& dir, const std::shared_ptr<LogSink>& log);
  // Opens an existing index for reading only (no lock, no writes; a live
  // tier may hold it) and returns its meta in *meta. NotFound when there is
  // no index at `dir`; Corruption when it has no valid meta, or files of it
  // are missing.
  static Result<std::unique_ptr<NvmeIndex>> OpenReadOnly(const std::string& dir, StoreMeta* meta);
  ~NvmeIndex();
  NvmeIndex(const NvmeIndex&) = delete;
  NvmeIndex& operator=(const NvmeIndex&) = delete;

  // Every region generation record (region -> generation) and every block
  // entry, in key order. Corrupt records are skipped and counted.
  Status Scan(const std::function<void(uint32_t region, uint64_t generation)>& on_region,
              const std::function<void(const NsKey&, const BlockLocation&)>& on_block,
              uint64_t* bad_records);

  // A write refused because RocksDB stopped writing after an error (a full
  // disk) asks RocksDB to resume, at most every 100 ms and once the index's
  // file system has 16 MiB free, and is tried once more: writes work again
  // as soon as space is back. (RocksDB's own
  // recovery, which is turned off, waited for 64 MiB free and retried every
  // few seconds; a store on a nearly full disk stopped persisting for good.)
  //
  // Durably (synced WAL) records a region's new generation.
  Status SetGeneration(uint32_t region, uint64_t generation);
  // Applies `updates` (and, when given, the store's write totals) in one
  // atomic, durable batch (WAL synced: a commit survives a power loss, not
  // only a killed process; the data it points at was made durable before).
  Status Apply(const std::vector<IndexUpdate>& updates, const WriteTotals* totals = nullptr);
  // The totals last applied; zeros for a store that never recorded any.
  Result<WriteTotals> ReadTotals();

 private:
  explicit NvmeIndex(rocksdb::DB* db);
  // A synced write of `batch`, resumed once as above. REQUIRES: mu_ held.
  Status WriteLocked(rocksdb::WriteBatch* batch, std::string_view what);
  // RocksDB is thread-safe, but the library is not built with ThreadSanitizer,
  // which cannot see its locks. The tier calls from two threads (the commit
  // loop and a writer opening a region), so one mutex orders the calls; a
  // synced write of RocksDB's would hold the second caller back as long.
  std::mutex mu_;
  std::unique_ptr<rocksdb::DB> db_;  // calls under mu_
  std::chrono::steady_clock::time_point last_resume_;  // guarded by mu_
};

}  // namespace kvtier::internal
