#include "tiers/nvme/nvme_index.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <filesystem>

namespace kvtier::internal {
namespace {

constexpr char kMetaKey[] = "M";
constexpr char kTotalsKey[] = "W";  // host bytes, device bytes: two EncodeU64 values
constexpr std::chrono::milliseconds kResumeInterval{100};
// RocksDB's write buffer (its default is 64 MiB; index entries are small),
// and the free space a resume needs: the buffer's flush, twice over.
constexpr uint64_t kWriteBufferBytes = 8ull << 20;
constexpr uint64_t kResumeFreeBytes = 2 * kWriteBufferBytes;

// The one place RocksDB errors become Status values.
Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  std::string m = "nvme index " + std::string(what) + ": " + s.ToString();
  if (s.IsCorruption()) return Status::Corruption(m);
  if (s.IsNotFound()) return Status::NotFound(m);
  if (s.IsNoSpace()) return Status::ResourceExhausted(m);
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(m);
  if (s.IsInvalidArgument()) return Status::InvalidArgument(m);
  return Status::IOError(m);
}

// RocksDB's own log, kept off the index's disk and sent to the tier's log
// (none: dropped). Its file logger asserts once a write to a full disk has
// failed, and Debian's librocksdb keeps assertions: the process aborted,
// and so did every later open of the store until space was freed.
class IndexLog : public rocksdb::Logger {
 public:
  explicit IndexLog(std::shared_ptr<LogSink> sink)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), sink_(std::move(sink)) {}

  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (sink_ == nullptr || level < GetInfoLogLevel()) return;
    char line[1024];
    const int n = std::vsnprintf(line, sizeof(line), format, ap);
    // RocksDB ends some lines with a newline of its own.
    for (size_t len = std::min<size_t>(n < 0 ? 0 : n, sizeof(line) - 1);
         len > 0 && line[len - 1] == '\n';) {
      line[--len] = '\0';
    }
    // Nothing may unwind into RocksDB: a line that cannot be logged is lost.
    try {
      sink_->Log(
          level >= rocksdb::InfoLogLevel::ERROR_LEVEL ? LogLevel::kError : LogLevel::kWarning,
          std::string("nvme index (rocksdb): ") + line);
    } catch (...) {
    }
  }

 private:
  const std::shared_ptr<LogSink> sink_;
};

// RocksDB's own recovery from a full disk polls for free space every few
// seconds, and only once a reserve the size of its write buffer is free;
// while it waits, a DB::Resume is refused as busy. The index resumes by
// itself on its next write instead (NvmeIndex::WriteLocked).
class NoAutoRecovery : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

rocksdb::Options DbOptions(std::shared_ptr<LogSink> log, rocksdb::Env* env = nullptr) {
  rocksdb::Options o;
  if (env != nullptr) o.env = env;
  o.listeners.push_back(std::make_shared<NoAutoRecovery>());
  o.write_buffer_size = kWriteBufferBytes;
  o.create_if_missing = true;
  o.max_open_files = 64;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  o.info_log = std::make_shared<IndexLog>(std::move(log));
  return o;
}

Result<rocksdb::DB*> OpenDb(const std::string& dir, const std::shared_ptr<LogSink>& log,
                            rocksdb::Env* env) {
  // Made here, not by create_if_missing: RocksDB first logs an error for a
  // directory it cannot read, and every new store's first open sent that
  // line to the engine's log. Only the last component, as RocksDB would: an
  // index_path under a disk that is not mounted must fail, not land on the
  // root file system. A failure shows in Open's status.
  std::error_code ec;
  std::filesystem::create_directory(dir, ec);
  rocksdb::DB* db = nullptr;
  KVTIER_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(DbOptions(log, env), dir, &db), "open " + dir));
  return db;
}

}  // namespace

NvmeIndex::NvmeIndex(rocksdb::DB* db) : db_(db) {}
NvmeIndex::~NvmeIndex() = default;

namespace {

// Same layout, and the same namespace unless either side is unbound (0).
bool Matches(StoreMeta stored, StoreMeta wanted) {
  if (stored.namespace_id == 0 || wanted.namespace_id == 0) {
    stored.namespace_id = wanted.namespace_id = 0;
  }
  return stored == wanted;
}

// True when the index holds a block record (a store's first open records
// its meta before any block).
bool ListsBlocks(rocksdb::DB& db) {
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
  it->Seek("B");
  return it->Valid() && it->key().size() > 0 && it->key()[0] == 'B';
}

// Destroys the index at `dir` (open in `db`) and creates it anew.
Result<std::unique_ptr<NvmeIndex>> Wipe(std::unique_ptr<rocksdb::DB> db, const std::string& dir,
                                        const StoreMeta& meta, const std::string& why,
                                        const std::shared_ptr<LogSink>& log, bool* wiped,
                                        rocksdb::Env* env) {
  if (log) log->Log(LogLevel::kWarning, "nvme store at " + dir + " wiped: " + why);
  db.reset();
  KVTIER_RETURN_IF_ERROR(FromRocks(rocksdb::DestroyDB(dir, DbOptions(log, env)), "destroy " + dir));
  auto index = NvmeIndex::Open(dir, meta, false, DataFound::kBlank, log, wiped, env);
  *wiped = true;
  return index;
}

}  // namespace

Result<std::unique_ptr<NvmeIndex>> NvmeIndex::Open(const std::string& dir, const StoreMeta& meta,
                                                   bool wipe_on_mismatch, DataFound data,
                                                   const std::shared_ptr<LogSink>& log, bool* wiped,
                                                   rocksdb::Env* env) {
  *wiped = false;
  KVTIER_ASSIGN_OR_RETURN(rocksdb::DB * raw, OpenDb(dir, log, env));
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), kMetaKey, &value);
  if (s.IsNotFound()) {
    if (data == DataFound::kData) {
      const std::string what =
          "has no index, but its data file already holds bytes: another program's file or "
          "device, or a store whose index was deleted";
      if (!wipe_on_mismatch) {
        return Status::InvalidArgument("nvme store at " + dir + " " + what +
                                       "; set 'on_mismatch: wipe' to let the tier write over it");
      }
      if (log)
        log->Log(LogLevel::kWarning, "nvme store at " + dir + " " + what + "; writing over it");
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    KVTIER_RETURN_IF_ERROR(FromRocks(db->Put(wo, kMetaKey, EncodeMeta(meta)), "write meta"));
    return std::unique_ptr<NvmeIndex>(new NvmeIndex(db.release()));
  }
  KVTIER_RETURN_IF_ERROR(FromRocks(s, "read meta"));
  std::optional<StoreMeta> stored = DecodeMeta(value);
  if (data == DataFound::kCreated) {
    const std::string why = "its data file was created anew or found empty";
    if (!wipe_on_mismatch && ListsBlocks(*db)) {
      // Data the index lists may still be on a disk not mounted, or a device
      // not found yet: refused, as a store of another layout is.
      return Status::InvalidArgument(
          "nvme store at " + dir + " lists blocks, but " + why +
          " (a disk not mounted, a device not found yet, or the file deleted or emptied); "
          "bring the data back, or set 'on_mismatch: wipe' to discard the index and start anew");
    }
    return Wipe(std::move(db), dir, meta, why, log, wiped, env);
  }
  if (stored && Matches(*stored, meta)) {
    if (stored->namespace_id == 0 && meta.namespace_id != 0) {
      // An unbound store (or one from before namespaces were recorded)
      // becomes bound to the first namespace that opens it.
      rocksdb::WriteOptions wo;
      wo.sync = true;
      KVTIER_RETURN_IF_ERROR(FromRocks(db->Put(wo, kMetaKey, EncodeMeta(meta)), "write meta"));
    }
    return std::unique_ptr<NvmeIndex>(new NvmeIndex(db.release()));
  }
  const std::string why =
      stored ? DescribeMismatch(*stored, meta) : std::string("not a kvtier nvme store");
  if (!wipe_on_mismatch) {
    // Only the namespace differs: the blocks are sound, but of another model.
    StoreMeta same_ns = meta;
    if (stored) same_ns.namespace_id = stored->namespace_id;
    const std::string what = stored && *stored == same_ns
                                 ? "was written for another namespace (another model, weights "
                                   "revision, dtype, layout or TP rank: "
                                 : "was written with another layout (";
    return Status::InvalidArgument("nvme store at " + dir + " " + what + why +
                                   "); set 'on_mismatch: wipe' to discard it");
  }
  return Wipe(std::move(db), dir, meta, why, log, wiped, env);
}

Status NvmeIndex::Destroy(const std::string& dir, const std::shared_ptr<LogSink>& log) {
  return FromRocks(rocksdb::DestroyDB(dir, DbOptions(log, nullptr)), "destroy " + dir);
}

Result<std::unique_ptr<NvmeIndex>> NvmeIndex::OpenReadOnly(const std::string& dir,
                                                           StoreMeta* meta) {
  rocksdb::Options o = DbOptions(nullptr);  // an offline reader logs nothing of RocksDB's
  o.create_if_missing = false;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(o, dir, &raw);
  // A missing directory comes back as InvalidArgument ("does not exist");
  // a directory missing a file of the index (CURRENT) as PathNotFound.
  if (s.IsInvalidArgument() || s.IsPathNotFound() || s.IsNotFound()) {
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) {
      return Status::Corruption("nvme index at " + dir +
                                " is damaged or incomplete (files missing): " + s.ToString());
    }
    return Status::NotFound("no nvme index at " + dir + ": " + s.ToString());
  }
  KVTIER_RETURN_IF_ERROR(FromRocks(s, "open " + dir + " read-only"));
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string value;
  rocksdb::Status got = db->Get(rocksdb::ReadOptions(), kMetaKey, &value);
  if (got.IsNotFound()) {
    // The tier writes it first of all: without it the index is empty, or
    // its files were lost in part (a missing CURRENT or MANIFEST).
    return Status::Corruption("nvme index at " + dir +
                              " holds no store record: it is empty, or damaged (files missing)");
  }
  KVTIER_RETURN_IF_ERROR(FromRocks(got, "read meta"));
  std::optional<StoreMeta> stored = DecodeMeta(value);
  if (!stored) return Status::Corruption("nvme index at " + dir + ": not a kvtier nvme store");
  // As the tier refuses it: the records of another format mean other things.
  if (stored->format_version != kNvmeFormatVersion) {
    return Status::InvalidArgument(
        "nvme index at " + dir + " has format version " + std::to_string(stored->format_version) +
        "; this build reads format version " + std::to_string(kNvmeFormatVersion) + " only");
  }
  // Readers size their tables from it: a damaged record must not ask for
  // terabytes.
  KVTIER_RETURN_IF_ERROR(CheckStoreMeta(*stored).WithContext("nvme index at " + dir));
  *meta = *stored;
  return std::unique_ptr<NvmeIndex>(new NvmeIndex(db.release()));
}

HeaderSample SampleHeaders(
    const IndexEntries& entries,
    const std::function<std::optional<Status>(const NsKey&, const BlockLocation&)>& read_header) {
  constexpr size_t kSamples = 8;
  const size_t n = std::min(kSamples, entries.size());
  HeaderSample sample;
  for (size_t i = 0; i < n; ++i) {
    const auto& [id, loc] = entries[i * entries.size() / n];
    std::optional<Status> st = read_header(id, loc);
    if (!st) continue;
    if (st->ok()) {
      sample.matched = true;
      return sample;
    }
    if (sample.failed++ == 0) sample.first = *st;
  }
  return sample;
}

// Sorted by region and offset, an entry overlaps an earlier one when it starts
// before the furthest end so far, and a later one when the next starts before
// its own end.
void DropOverlaps(IndexEntries& kept, std::vector<IndexUpdate>& drops) {
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second.region, a.second.offset) <
           std::pair(b.second.region, b.second.offset);
  });
  IndexEntries apart;
  uint64_t reach = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    const BlockLocation& loc = kept[i].second;
    if (i == 0 || kept[i - 1].second.region != loc.region) reach = 0;
    const uint64_t end = loc.offset + DiskBytes(loc.payload_bytes);
    const bool next_overlaps = i + 1 < kept.size() && kept[i + 1].second.region == loc.region &&
                               kept[i + 1].second.offset < end;
    if (loc.offset < reach || next_overlaps) {
      drops.push_back({kept[i].first, std::nullopt});
    } else {
      apart.push_back(kept[i]);
    }
    reach = std::max(reach, end);
  }
  kept = std::move(apart);
}

Status NvmeIndex::Scan(const std::function<void(uint32_t, uint64_t)>& on_region,
                       const std::function<void(const NsKey&, const BlockLocation&)>& on_block,
                       uint64_t* bad_records) {
  std::lock_guard lock(mu_);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    std::string_view k(it->key().data(), it->key().size());
    std::string_view v(it->value().data(), it->value().size());
    if (k == kMetaKey || k == kTotalsKey) continue;
    if (auto region = DecodeRegionRecordKey(k)) {
      if (auto gen = DecodeU64(v)) {
        on_region(*region, *gen);
        continue;
      }
    } else if (auto id = DecodeBlockRecordKey(k)) {
      if (auto loc = DecodeLocation(v)) {
        on_block(*id, *loc);
        continue;
      }
    }
    ++*bad_records;
  }
  return FromRocks(it->status(), "scan");
}

Status NvmeIndex::WriteLocked(rocksdb::WriteBatch* batch, std::string_view what) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, batch);
  // Once a write has failed for want of space RocksDB refuses every later
  // one (a background error) until it is resumed.
  if (!s.IsIOError() && !s.IsNoSpace()) return FromRocks(s, what);
  const auto now = std::chrono::steady_clock::now();
  if (last_resume_ != std::chrono::steady_clock::time_point{} &&
      now - last_resume_ < kResumeInterval) {
    return FromRocks(s, what);
  }
  last_resume_ = now;
  // Not while the disk is still full: a resume that fails part way can
  // leave the index unable to resume until it is reopened.
  uint64_t free_bytes = 0;
  if (db_->GetEnv()->GetFreeSpace(db_->GetName(), &free_bytes).ok() &&
      free_bytes < kResumeFreeBytes) {
    return FromRocks(s, what);
  }
  if (!db_->Resume().ok()) return FromRocks(s, what);
  return FromRocks(db_->Write(wo, batch), what);
}

Status NvmeIndex::SetGeneration(uint32_t region, uint64_t generation) {
  rocksdb::WriteBatch batch;
  batch.Put(RegionRecordKey(region), EncodeU64(generation));
  std::lock_guard lock(mu_);
  return WriteLocked(&batch, "write region generation");
}

Status NvmeIndex::Apply(const std::vector<IndexUpdate>& updates, const WriteTotals* totals) {
  if (updates.empty() && totals == nullptr) return Status::Ok();
  rocksdb::WriteBatch batch;
  if (totals != nullptr) {
    batch.Put(kTotalsKey, EncodeU64(totals->host_bytes) + EncodeU64(totals->device_bytes));
  }
  for (const IndexUpdate& u : updates) {
    const std::string key = BlockRecordKey(u.id);
    if (u.location) {
      batch.Put(key, EncodeLocation(*u.location));
    } else {
      batch.Delete(key);
    }
  }
  // One WAL sync per group commit, beside the data file's: the tier says a
  // crash loses only what no commit covered, and Flush that what it covers
  // is durable, which an unsynced WAL would not be after a power loss.
  std::lock_guard lock(mu_);
  return WriteLocked(&batch, "write batch");
}

Result<WriteTotals> NvmeIndex::ReadTotals() {
  std::string value;
  std::lock_guard lock(mu_);
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kTotalsKey, &value);
  if (s.IsNotFound()) return WriteTotals{};
  KVTIER_RETURN_IF_ERROR(FromRocks(s, "read write totals"));
  const std::string_view v(value);
  auto host = v.size() == 16 ? DecodeU64(v.substr(0, 8)) : std::nullopt;
  auto device = v.size() == 16 ? DecodeU64(v.substr(8)) : std::nullopt;
  if (!host || !device) return Status::Corruption("nvme index: malformed write totals record");
  return WriteTotals{*host, *device};
}

}  // namespace kvtier::internal
