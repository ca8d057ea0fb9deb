// The NVMe index on a disk that fills and then has room again: RocksDB
// refuses every write after one failed for want of space, until it is
// resumed. The index resumes it itself, so commits and new regions work
// again as soon as the space is back, not only once RocksDB's own recovery
// (which waits seconds between tries, and never clears the error while the
// disk's free space is below its 64 MiB reserve) gets to it.
#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/block_data.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_index.h"

namespace kvtier::testing {
namespace {

using internal::IndexUpdate;
using internal::NvmeIndex;

// A file system whose writes fail with "no space" while `full` is set, and
// which reports no free space then (as a full disk does), so that RocksDB's
// own recovery cannot clear the error.
class FillingFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FillingFs(std::shared_ptr<rocksdb::FileSystem> base) : FileSystemWrapper(base) {}
  const char* Name() const override { return "FillingFs"; }

  std::atomic<bool> full{false};

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    if (full) return rocksdb::IOStatus::NoSpace("full");
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, &file, dbg);
    if (s.ok()) *r = std::make_unique<File>(std::move(file), this);
    return s;
  }
  rocksdb::IOStatus GetFreeSpace(const std::string& path, const rocksdb::IOOptions& o,
                                 uint64_t* free, rocksdb::IODebugContext* dbg) override {
    if (full) {
      *free = 0;
      return rocksdb::IOStatus::OK();
    }
    return target()->GetFreeSpace(path, o, free, dbg);
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, FillingFs* fs)
        : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->full) return rocksdb::IOStatus::NoSpace("full");
      return target()->Append(d, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->full) return rocksdb::IOStatus::NoSpace("full");
      return target()->Append(d, o, v, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->full) return rocksdb::IOStatus::NoSpace("full");
      return target()->Sync(o, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->full) return rocksdb::IOStatus::NoSpace("full");
      return target()->Fsync(o, dbg);
    }

   private:
    FillingFs* fs_;
  };
};

std::vector<IndexUpdate> OneBlock(uint64_t i) {
  internal::BlockLocation loc;
  loc.region = 1;
  loc.offset = static_cast<uint32_t>(i * 4096);
  loc.payload_bytes = 4096;
  loc.generation = 1;
  return {IndexUpdate{internal::NsKey{NamespaceId{1}, TestKey(i)}, loc}};
}

uint64_t BlocksIn(NvmeIndex& index) {
  uint64_t blocks = 0, bad = 0;
  EXPECT_TRUE(index.Scan([](uint32_t, uint64_t) {},
                         [&](const internal::NsKey&, const internal::BlockLocation&) { ++blocks; },
                         &bad)
                  .ok());
  return blocks;
}

TEST(NvmeIndexFullDisk, WritesWorkAgainOnceThereIsRoom) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto fs = std::make_shared<FillingFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  const internal::StoreMeta meta{internal::kNvmeFormatVersion, 4096, 1 << 20, 8, 0};
  bool wiped = false;
  auto index = NvmeIndex::Open(dir.path() + "/index", meta, false, internal::DataFound::kCreated,
                               nullptr, &wiped, env.get());
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_TRUE((*index)->Apply(OneBlock(0)).ok());

  fs->full = true;
  Status st = (*index)->Apply(OneBlock(1));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_FALSE((*index)->SetGeneration(2, 7).ok());

  fs->full = false;
  // Past the 100 ms between resumes, so the first write tries one.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  st = (*index)->Apply(OneBlock(1));
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE((*index)->SetGeneration(2, 7).ok());
  EXPECT_TRUE((*index)->Apply(OneBlock(2)).ok());
  EXPECT_EQ(BlocksIn(**index), 3u);
  index->reset();

  // And what was written after the disk had room again is durable.
  auto reopened = NvmeIndex::Open(dir.path() + "/index", meta, false, internal::DataFound::kData,
                                  nullptr, &wiped, env.get());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_FALSE(wiped);
  EXPECT_EQ(BlocksIn(**reopened), 3u);
}

}  // namespace
}  // namespace kvtier::testing
