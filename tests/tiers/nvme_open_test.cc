// What the NVMe tier finds at its path when it opens: another program's
// file, a store whose index was deleted, a data file cut short, a first
// sizing that failed, a lock shared with a forked child; and the timed
// index commit of a tier written slowly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/recording_log.h"
#include "tests/support/time_scale.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_file.h"
#include "tiers/nvme/nvme_index.h"

namespace kvtier::testing {
namespace {

using internal::OpenNvmeTier;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A file of someone else's bytes at the configured path, no index beside
// it: the tier would write over it, so it refuses unless told to wipe.
TEST(NvmeOpen, AFileHoldingBytesWithoutAnIndexIsRefusedUnlessWiped) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  const std::string precious(64 * 1024, 'p');
  std::ofstream(o.path, std::ios::binary) << precious;

  auto refused = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString(),
            "invalid_argument: tier 'ssd': nvme store at " + o.path +
                ".index has no index, but its data file already holds bytes: another "
                "program's file or device, or a store whose index was deleted; set "
                "'on_mismatch: wipe' to let the tier write over it");
  EXPECT_EQ(ReadFile(o.path), precious);
  auto again = OpenNvmeTier(o, TierContext{8192});  // no layout was recorded meanwhile
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(ReadFile(o.path), precious);

  o.nvme.on_mismatch = "wipe";
  auto wiped = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(wiped.ok()) << wiped.status().ToString();
  WriteBlocks(**wiped, 0, 2, 8192);
  EXPECT_TRUE(ReadAndCheck(**wiped, 1, 8192).ok());
  (*wiped)->Shutdown();
}

// A store whose index directory was deleted: its blocks cannot be found
// again, and the tier says so instead of silently reusing the file.
TEST(NvmeOpen, AStoreWhoseIndexWasDeletedIsRefused) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  {
    auto t = OpenNvmeTier(o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    WriteBlocks(**t, 0, 4, 8192);
    (*t)->Shutdown();
  }
  std::filesystem::remove_all(o.path + ".index");
  auto refused = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("has no index, but its data file already holds"),
            std::string::npos)
      << refused.status().ToString();
}

// A data file truncated to fewer regions: the blocks cut off are dropped at
// open (NotFound), not recovered to fail with Corruption at every load.
TEST(NvmeOpen, BlocksCutOffByATruncationAreDroppedAtOpen) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = NvmeOptions(dir.path(), 40, 8192);  // 12 KiB a block on disk
  constexpr uint64_t kBlocks = 30;
  std::vector<uint64_t> offsets;
  {
    auto t = OpenNvmeTier(o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    WriteBlocks(**t, 0, kBlocks, 8192);
    for (uint64_t i = 0; i < kBlocks; ++i) {
      auto at = (*t)->TEST_FileOffset(kNvmeNs, TestKey(i));
      ASSERT_TRUE(at.has_value());
      offsets.push_back(*at);
    }
    (*t)->Shutdown();
  }
  // Cut where the middle block starts: it and the blocks after it are lost.
  std::sort(offsets.begin(), offsets.end());
  const uint64_t cut = offsets[kBlocks / 2];
  const auto kept = static_cast<uint64_t>(std::count_if(
      offsets.begin(), offsets.end(), [&](uint64_t at) { return at + 3 * 4096 <= cut; }));
  ASSERT_GT(kept, 0u);
  ASSERT_LT(kept, kBlocks);
  ASSERT_EQ(::truncate(o.path.c_str(), static_cast<off_t>(cut)), 0);

  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "truncated");
  auto t = OpenNvmeTier(o, TierContext{8192, SystemClock(), log, {}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Stats().recovered_blocks, kept);
  EXPECT_EQ((*t)->Stats().dropped_on_open, kBlocks - kept);
  // The operator learns why the blocks are gone.
  EXPECT_EQ(log->lines(), std::vector<std::string>{
                              "nvme: " + o.path + " was truncated to " + std::to_string(cut) +
                              " bytes since the store last closed; " +
                              std::to_string(kBlocks - kept) + " blocks past that were dropped"});
  uint64_t found = 0;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    const Status st = ReadAndCheck(**t, i, 8192);
    EXPECT_TRUE(st.ok() || st.code() == StatusCode::kNotFound) << i << ": " << st.ToString();
    if (st.ok()) ++found;
  }
  EXPECT_EQ(found, kept);
  (*t)->Shutdown();
}

// Caps the size of files this process may write (RLIMIT_FSIZE), with
// SIGXFSZ at its default action (ending the process, as it would an engine
// whose file grew past the cap); both restored on exit.
class FileSizeCap {
 public:
  explicit FileSizeCap(rlim_t bytes) {
    old_handler_ = signal(SIGXFSZ, SIG_DFL);
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit capped = old_;
    capped.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &capped) == 0;
  }
  ~FileSizeCap() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }
  FileSizeCap(const FileSizeCap&) = delete;
  FileSizeCap& operator=(const FileSizeCap&) = delete;
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  sighandler_t old_handler_ = SIG_DFL;
  bool ok_ = false;
};

// An engine run under a file size limit (ulimit -f) smaller than the tier:
// growing the file past it would raise SIGXFSZ, whose default action ends
// the engine. The open is refused first, naming the limit; the file is not
// grown, and nothing is left that refuses a retry with a capacity that fits.
TEST(NvmeOpen, AFileSizeLimitBelowTheTierIsRefusedBeforeTheFileGrows) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 512, 8192);  // 6 MiB on disk and more
  {
    FileSizeCap cap(2 << 20);
    ASSERT_TRUE(cap.ok());
    auto refused = OpenNvmeTier(o, TierContext{8192});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("past this process's file size limit of 2097152 "
                                              "bytes (ulimit -f, RLIMIT_FSIZE)"),
              std::string::npos)
        << refused.status().ToString();
    EXPECT_EQ(std::filesystem::file_size(o.path), 0u);
  }
  o.capacity_bytes = 16 * 8192;
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WriteBlocks(**t, 0, 2, 8192);
  EXPECT_TRUE(ReadAndCheck(**t, 1, 8192).ok());
  (*t)->Shutdown();
}

// An index whose table file was damaged (RocksDB finds a block failing its
// checksum when the open scans it): refused, naming the fix; with
// on_mismatch: wipe the store starts empty and takes writes, where before
// every open failed until the index was deleted by hand.
TEST(NvmeOpen, ADamagedIndexIsRefusedUnlessWiped) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 64, 8192);
  for (int run = 0; run < 2; ++run) {  // the second open moves the log into a table file
    auto t = OpenNvmeTier(o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    if (run == 0) WriteBlocks(**t, 0, 40, 8192);
    (*t)->Shutdown();
  }
  std::string table;
  for (const auto& f : std::filesystem::directory_iterator(o.path + ".index")) {
    if (f.path().extension() == ".sst") table = f.path().string();
  }
  ASSERT_FALSE(table.empty()) << "no table file to damage";
  {
    std::fstream f(table, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(table) / 4));
    const std::string junk(64, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }

  auto refused = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruption);
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("nvme store at " + o.path + ": its index is damaged ("), std::string::npos)
      << message;
  EXPECT_NE(message.find("; set 'on_mismatch: wipe' to discard the index and its blocks"),
            std::string::npos)
      << message;

  o.nvme.on_mismatch = "wipe";
  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "its index is damaged");
  auto t = OpenNvmeTier(o, TierContext{8192, SystemClock(), log, {}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(log->lines().size(), 1u);
  EXPECT_EQ((*t)->Stats().recovered_blocks, 0u);
  EXPECT_EQ(ReadAndCheck(**t, 3, 8192).code(), StatusCode::kNotFound);
  WriteBlocks(**t, 100, 40, 8192);
  for (uint64_t i = 100; i < 140; ++i) EXPECT_TRUE(ReadAndCheck(**t, i, 8192).ok()) << i;
  (*t)->Shutdown();
  o.nvme.on_mismatch = "refuse";  // the fresh index is whole again
  auto again = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->Stats().recovered_blocks, 40u);
  (*again)->Shutdown();
}

// What a full ext4 disk leaves of a new file whose fallocate failed: part
// of it allocated, the size grown. Emptied again, the next open starts
// afresh instead of refusing the layout the failed open recorded; a file
// that held bytes before the open is never touched.
TEST(NvmeOpen, APartlySizedNewFileIsEmptiedAndAnOldOneKept) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path() + "/data";
  {
    auto f = internal::DataFile::Open(path, false, nullptr);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(f->created());
    ASSERT_EQ(::ftruncate(f->fd(), 64 * 1024), 0);  // the part fallocate got
    f->ForgetCreated();
  }
  EXPECT_EQ(std::filesystem::file_size(path), 0u);

  const std::string old(8192, 'o');
  std::ofstream(path, std::ios::binary) << old;
  {
    auto f = internal::DataFile::Open(path, false, nullptr);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_FALSE(f->created());
    EXPECT_TRUE(f->holds_data());
    EXPECT_EQ(f->size_at_open(), old.size());
    f->ForgetCreated();
  }
  EXPECT_EQ(ReadFile(path), old);
}

// An engine worker forked (without exec) while the tier is open shares the
// store's lock; the parent's close still frees the store for its next open.
TEST(NvmeOpen, AForkedChildDoesNotKeepTheStoreLocked) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::array<int, 2> gate{}, ready{};
  ASSERT_EQ(pipe2(gate.data(), O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(ready.data(), O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(gate[1]);
    // The fork handler has let go of the lock before fork returned here;
    // until the child has run that far, it still shares the parent's.
    (void)!write(ready[1], "r", 1);
    char c = 0;
    (void)!read(gate[0], &c, 1);  // returns once the parent closes its end
    _exit(0);
  }
  close(gate[0]);
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  (*t)->Shutdown();
  auto again = OpenNvmeTier(o, TierContext{8192});
  close(gate[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  (*again)->Shutdown();
}

// The entries the index at `dir` holds, read while its tier runs.
uint64_t EntriesIn(const std::string& dir) {
  internal::StoreMeta meta;
  auto index = internal::NvmeIndex::OpenReadOnly(dir, &meta);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  if (!index.ok()) return 0;
  uint64_t entries = 0;
  uint64_t bad = 0;
  EXPECT_TRUE((*index)
                  ->Scan([](uint32_t, uint64_t) {},
                         [&](const internal::NsKey&, const internal::BlockLocation&) { ++entries; },
                         &bad)
                  .ok());
  return entries;
}

// The index entries of a tier written more slowly than commit_every_blocks
// reach RocksDB within commit_interval_ms, without a Flush: a kill -9 then
// loses nothing written before the interval.
TEST(NvmeOpen, ASlowWriterReachesTheIndexWithinTheCommitInterval) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  o.nvme.commit_every_blocks = 1000;
  o.nvme.commit_interval_ms = 50;
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WriteBlocks(**t, 0, 3, 8192);
  // The blocks of the batch become pending one by one, so a timed commit may
  // take only some of them; the next takes the rest. Polled: what the index
  // (read beside the live tier) holds, until all 3 or the bound.
  const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(10));
  uint64_t entries = 0;
  for (;;) {
    ASSERT_NO_FATAL_FAILURE(entries = EntriesIn(o.path + ".index"));
    if (entries == 3 || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(entries, 3u);
  (*t)->Shutdown();
}

// index_path set to another store's index of the same layout: its entries
// fit this file, but no block it lists is there. The open is refused as for
// a damaged index (each block would otherwise fail only when read), and
// with on_mismatch: wipe the tier starts empty.
TEST(NvmeOpen, AnotherStoresIndexIsRefusedUnlessWiped) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  std::filesystem::create_directory(dir.path() + "/a");
  std::filesystem::create_directory(dir.path() + "/b");
  TierOptions a = NvmeOptions(dir.path() + "/a", 16, 8192);
  TierOptions b = NvmeOptions(dir.path() + "/b", 16, 8192);
  for (auto [o, first] : {std::pair{&a, 0}, std::pair{&b, 100}}) {
    auto t = OpenNvmeTier(*o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    WriteBlocks(**t, first, 4, 8192);
    (*t)->Shutdown();
  }
  TierOptions mixed = a;
  mixed.nvme.index_path = b.path + ".index";
  auto refused = OpenNvmeTier(mixed, TierContext{8192});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruption);
  EXPECT_NE(refused.status().message().find(
                "none of 4 blocks sampled from it has its header in the data file"),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("set 'on_mismatch: wipe'"), std::string::npos);
  // Each store still opens whole with its own index.
  for (auto [o, first] : {std::pair{&a, 0}, std::pair{&b, 100}}) {
    auto t = OpenNvmeTier(*o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->Stats().recovered_blocks, 4u);
    for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(ReadAndCheck(**t, first + i, 8192).ok());
    (*t)->Shutdown();
  }
  mixed.nvme.on_mismatch = "wipe";
  auto wiped = OpenNvmeTier(mixed, TierContext{8192});
  ASSERT_TRUE(wiped.ok()) << wiped.status().ToString();
  EXPECT_EQ((*wiped)->Stats().recovered_blocks, 0u);
  (*wiped)->Shutdown();
}

// A file system that cannot reserve space (ext2 has no fallocate) leaves
// the file sparse: a capacity beyond its free space is refused at open, not
// found out when writes and index commits fail on a full disk. Needs root
// and a loop device; skipped without.
TEST(NvmeOpen, ACapacityBeyondTheFreeSpaceOfASparseFileSystemIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a loop file system needs root";
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string image = dir.path() + "/fs.img", mnt = dir.path() + "/mnt";
  std::filesystem::create_directory(mnt);
  const std::string make = "truncate -s 24M " + image + " && mkfs.ext2 -q -F " + image +
                           " >/dev/null 2>&1 && mount -o loop " + image + " " + mnt +
                           " >/dev/null 2>&1";
  if (std::system(make.c_str()) != 0) GTEST_SKIP() << "no loop mount of ext2 here";
  // Lazily: the kernel may still hold the tier's files for a moment after
  // it closed them (io_uring tears its ring down in the background), and a
  // plain umount would then fail and leave the mount behind.
  struct Unmount {
    std::string at;
    ~Unmount() { (void)std::system(("umount -l " + at + " >/dev/null 2>&1").c_str()); }
  } unmount{mnt};
  TierOptions o = NvmeOptions(mnt, 4096, 8192);  // 32 MiB of blocks on 24 MiB
  auto big = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("cannot reserve space (no fallocate)"), std::string::npos)
      << big.status().ToString();
  EXPECT_NE(big.status().message().find("lower the capacity or free space"), std::string::npos);
  o.capacity_bytes = 256 * 8192;  // 2 MiB: fits, sparse
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WriteBlocks(**t, 0, 4, 8192);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(ReadAndCheck(**t, i, 8192).ok()) << i;
  (*t)->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
