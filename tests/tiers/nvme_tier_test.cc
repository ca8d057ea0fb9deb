// The NVMe tier: the conformance suite (O_DIRECT on a disk file system and
// the buffered fallback on tmpfs), restart, layout mismatch, reclaim and
// accounting.
#include "tiers/nvme/nvme_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "kvtier/config.h"
#include "tests/support/block_data.h"
#include "tests/support/tier_conformance.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_format.h"

namespace kvtier::testing {
namespace {

using internal::NvmeTier;
using internal::OpenNvmeTier;

constexpr NamespaceId kNs = kNvmeNs;

// Scratch directories of the conformance makers live until the process ends
// (the suite owns the tiers, not their files); removed at exit.
std::vector<std::unique_ptr<ScratchDir>>& MakerDirs() {
  static std::vector<std::unique_ptr<ScratchDir>> dirs;
  return dirs;
}

Result<std::unique_ptr<Tier>> MakeIn(const std::string& parent, uint64_t capacity_blocks,
                                     uint64_t block_bytes) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  MakerDirs().push_back(std::make_unique<ScratchDir>(parent));
  TierOptions o = NvmeOptions(MakerDirs().back()->path(), capacity_blocks, block_bytes);
  return CreateTier(o, TierContext{block_bytes});
}

Result<std::unique_ptr<Tier>> MakeDirect(uint64_t capacity_blocks, uint64_t block_bytes) {
  return MakeIn(KVTIER_BINARY_DIR, capacity_blocks, block_bytes);
}

Result<std::unique_ptr<Tier>> MakeBuffered(uint64_t capacity_blocks, uint64_t block_bytes) {
  return MakeIn("/dev/shm", capacity_blocks, block_bytes);
}

std::vector<TierMaker> Makers() {
  std::vector<TierMaker> m = {{"NvmeDirect", MakeDirect}};
  if (IsTmpfs("/dev/shm")) m.push_back({"NvmeBufferedTmpfs", MakeBuffered});
  return m;
}

INSTANTIATE_TEST_SUITE_P(Nvme, TierConformanceTest, ::testing::ValuesIn(Makers()), TierMakerName);

TEST(NvmeTier, RestartKeepsEveryBlock) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr uint64_t kBytes = 48 * 1024 + 100;  // not a multiple of 4 KiB: the bounce path
  TierOptions o = NvmeOptions(dir.path(), 64, kBytes);
  {
    auto t = OpenNvmeTier(o, TierContext{kBytes});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE((*t)->Stats().direct_io) << "the build directory should accept O_DIRECT";
    WriteBlocks(**t, 0, 40, kBytes);
    std::vector<BlockKey> gone = {TestKey(3), TestKey(7)};
    ASSERT_TRUE((*t)->Remove(kNs, gone).Wait().ok());
    (*t)->Shutdown();
  }
  auto t = OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Stats().recovered_blocks, 38u);
  EXPECT_EQ((*t)->Usage().blocks, 0u);  // recovered blocks count once read
  for (uint64_t i = 0; i < 40; ++i) {
    Status st = ReadAndCheck(**t, i, kBytes);
    if (i == 3 || i == 7) {
      EXPECT_EQ(st.code(), StatusCode::kNotFound) << i;
    } else {
      EXPECT_TRUE(st.ok()) << i << ": " << st.ToString();
    }
  }
  EXPECT_EQ((*t)->Usage().blocks, 38u);
  EXPECT_EQ((*t)->Usage().used_bytes, 38 * kBytes);
  (*t)->Shutdown();
}

// Opens a tier of 8 KiB blocks at `o`, writes blocks 0..3 and shuts it down.
void WriteFourBlocksAndClose(const TierOptions& o) {
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WriteBlocks(**t, 0, 4, 8192);
  (*t)->Shutdown();
}

TEST(NvmeTier, LayoutMismatchIsRefusedOrWiped) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  ASSERT_NO_FATAL_FAILURE(WriteFourBlocksAndClose(o));
  auto refused = OpenNvmeTier(o, TierContext{16384});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString(),
            "invalid_argument: tier 'ssd': nvme store at " + dir.path() +
                "/data.index was written with another layout (block size 8192 != 16384); set "
                "'on_mismatch: wipe' to discard it");
  o.nvme.on_mismatch = "wipe";
  auto wiped = OpenNvmeTier(o, TierContext{16384});
  ASSERT_TRUE(wiped.ok()) << wiped.status().ToString();
  EXPECT_EQ((*wiped)->Stats().recovered_blocks, 0u);
  EXPECT_EQ(ReadAndCheck(**wiped, 0, 16384).code(), StatusCode::kNotFound);
  (*wiped)->Shutdown();
}

// A larger capacity is another layout (more regions). Refused, the store is
// left as it was: its data file is not grown to the new size first.
TEST(NvmeTier, ARefusedCapacityChangeLeavesTheDataFileAsItWas) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  ASSERT_NO_FATAL_FAILURE(WriteFourBlocksAndClose(o));
  struct stat before {};
  ASSERT_EQ(::stat(o.path.c_str(), &before), 0);
  o.capacity_bytes *= 64;
  auto refused = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("was written with another layout (region count "),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find(", data file size "), std::string::npos)
      << "the count follows from the capacity, which is what changed";
  struct stat after {};
  ASSERT_EQ(::stat(o.path.c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size);
  EXPECT_EQ(after.st_blocks, before.st_blocks);
  o.capacity_bytes /= 64;  // the old size still opens, blocks intact
  auto reopened = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->Stats().recovered_blocks, 4u);
  (*reopened)->Shutdown();
}

// The store of `o` (four blocks written by WriteFourBlocksAndClose) opens
// with none of them: each is NotFound, and new writes work.
void ExpectOpensEmpty(const TierOptions& o) {
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Stats().recovered_blocks, 0u);
  EXPECT_EQ((*t)->Usage().blocks, 0u);
  for (uint64_t i = 0; i < 4; ++i)
    EXPECT_EQ(ReadAndCheck(**t, i, 8192).code(), StatusCode::kNotFound);
  WriteBlocks(**t, 10, 2, 8192);
  EXPECT_TRUE(ReadAndCheck(**t, 10, 8192).ok());
  (*t)->Shutdown();
}

// The data file missing while its index lists blocks: a disk not mounted
// at this start, or a device not found yet. The open is refused, leaves no
// file at the path, and the store opens whole once the file is back; with
// on_mismatch: wipe it starts empty instead.
TEST(NvmeTier, AnIndexWhoseDataFileIsMissingIsRefusedUnlessWiped) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  ASSERT_NO_FATAL_FAILURE(WriteFourBlocksAndClose(o));
  const std::string away = dir.path() + "/away";
  ASSERT_EQ(::rename(o.path.c_str(), away.c_str()), 0);
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("lists blocks, but its data file was created anew or found "
                                      "empty (a disk not mounted"),
            std::string::npos)
      << t.status().ToString();
  struct stat st {};
  EXPECT_NE(::stat(o.path.c_str(), &st), 0) << "a refused open left a file behind";

  ASSERT_EQ(::rename(away.c_str(), o.path.c_str()), 0);
  {
    auto back = OpenNvmeTier(o, TierContext{8192});
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ((*back)->Stats().recovered_blocks, 4u);
    for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(ReadAndCheck(**back, i, 8192).ok()) << i;
    (*back)->Shutdown();
  }

  ASSERT_EQ(::unlink(o.path.c_str()), 0);
  o.nvme.on_mismatch = "wipe";
  ASSERT_NO_FATAL_FAILURE(ExpectOpensEmpty(o));
}

// A device path that does not exist (not found yet, or renamed) is not
// made into a file on /dev's file system, in memory.
TEST(NvmeTier, AMissingDeviceIsNotMadeAFile) {
  struct stat dev {
  }, root{};
  ASSERT_EQ(::stat("/dev", &dev), 0);
  ASSERT_EQ(::stat("/", &root), 0);
  if (dev.st_dev == root.st_dev) GTEST_SKIP() << "/dev is not a file system of its own here";
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  o.path = "/dev/kvtier-no-such-device-" + std::to_string(::getpid());
  o.nvme.index_path = dir.path() + "/index";
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("nvme: no device at " + o.path), std::string::npos)
      << t.status().ToString();
  struct stat st {};
  EXPECT_NE(::stat(o.path.c_str(), &st), 0);
}

// An empty data file beside an index. A first open that could not size the
// file (a full disk) leaves one beside an index of no block: the retry, with
// another capacity, opens. A file emptied since its blocks were written is
// refused as a missing one is, unless on_mismatch: wipe.
TEST(NvmeTier, AnEmptyDataFileBesideAnIndexOfBlocksIsRefusedUnlessWiped) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  {
    auto t = OpenNvmeTier(o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    (*t)->Shutdown();
  }
  ASSERT_EQ(::truncate(o.path.c_str(), 0), 0);
  o.capacity_bytes *= 2;
  ASSERT_NO_FATAL_FAILURE(WriteFourBlocksAndClose(o));

  ASSERT_EQ(::truncate(o.path.c_str(), 0), 0);
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("lists blocks"), std::string::npos) << t.status().ToString();
  o.nvme.on_mismatch = "wipe";
  ASSERT_NO_FATAL_FAILURE(ExpectOpensEmpty(o));
}

// An index_path whose parent is missing (a disk not mounted) fails the open:
// creating the parents would put the index on whatever file system holds
// them, to be hidden once the disk is mounted again.
TEST(NvmeTier, AnIndexPathUnderAMissingDirectoryIsRefused) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  o.nvme.index_path = dir.path() + "/not_mounted/kv.index";
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not_mounted/kv.index"), std::string::npos)
      << t.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/not_mounted"));
}

// Fill, remove every other block, write again: the tier must reclaim the
// dead half, keep every live block readable, and account for the rewrite.
void ReclaimKeepsLiveBlocks(const std::string& policy) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr uint64_t kBytes = 16 * 1024;  // 20 KiB on disk: 12 per 256 KiB region
  TierOptions o = NvmeOptions(dir.path(), 48, kBytes);
  o.nvme.reclaim = policy;
  auto t = OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const uint32_t regions = (*t)->Stats().regions;
  EXPECT_EQ(regions, 6u);  // 4 for the capacity + 2 spare
  uint64_t next = 0;
  std::map<uint64_t, bool> live;
  for (int round = 0; round < 6; ++round) {
    const uint64_t room = 48 - (*t)->Usage().blocks;
    WriteBlocks(**t, next, room, kBytes);
    for (uint64_t i = next; i < next + room; ++i) live[i] = true;
    next += room;
    // Remove every other live block.
    std::vector<BlockKey> gone;
    bool flip = false;
    for (auto& [i, alive] : live) {
      if (!alive) continue;
      if (flip) {
        gone.push_back(TestKey(i));
        alive = false;
      }
      flip = !flip;
    }
    ASSERT_TRUE((*t)->Remove(kNs, gone).Wait().ok());
  }
  internal::NvmeStats st = (*t)->Stats();
  EXPECT_GT(st.reclaims, 0u);
  EXPECT_GT(st.bytes_reinserted, 0u);
  EXPECT_GT(st.WriteAmplification(), 1.0);
  EXPECT_EQ(st.corruptions, 0u);
  for (auto& [i, alive] : live) {
    Status s = ReadAndCheck(**t, i, kBytes);
    EXPECT_EQ(s.code(), alive ? StatusCode::kOk : StatusCode::kNotFound)
        << i << " " << s.ToString();
  }
  (*t)->Shutdown();
  // And the rewritten locations survive a restart.
  auto again = OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (auto& [i, alive] : live) {
    Status s = ReadAndCheck(**again, i, kBytes);
    EXPECT_EQ(s.code(), alive ? StatusCode::kOk : StatusCode::kNotFound)
        << i << " " << s.ToString();
  }
  (*again)->Shutdown();
}

TEST(NvmeTier, FifoReclaimKeepsLiveBlocks) { ReclaimKeepsLiveBlocks("fifo"); }
TEST(NvmeTier, GreedyReclaimKeepsLiveBlocks) { ReclaimKeepsLiveBlocks("greedy"); }

TEST(NvmeTier, AccountsHostAndDeviceBytes) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok());
  WriteBlocks(**t, 0, 10, 8192);
  internal::NvmeStats st = (*t)->Stats();
  EXPECT_EQ(st.host_bytes_written, 10u * 8192);
  EXPECT_EQ(st.device_bytes_written, 10u * (4096 + 8192));  // a header page per block
  EXPECT_DOUBLE_EQ(st.WriteAmplification(), 1.5);
  EXPECT_EQ(st.reclaims, 0u);
  (*t)->Shutdown();
}

// Whether O_DIRECT works on tmpfs depends on the kernel (6.6 added it); the
// tier must report what it got, and work either way. direct_io: false forces
// the buffered path.
TEST(NvmeTier, TmpfsAndBufferedModeWorkAndAreReported) {
  if (!IsTmpfs("/dev/shm")) GTEST_SKIP() << "/dev/shm is not a tmpfs here";
  ScratchDir dir("/dev/shm");
  ASSERT_TRUE(dir.ok());
  const std::string probe = dir.path() + "/probe";
  int fd = open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  const bool tmpfs_direct = fd >= 0;
  if (fd >= 0) close(fd);
  for (bool want_direct : {true, false}) {
    ScratchDir sub(dir.path());
    TierOptions o = NvmeOptions(sub.path(), 8, 4096);
    o.nvme.direct_io = want_direct;
    auto t = OpenNvmeTier(o, TierContext{4096});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->Stats().direct_io, want_direct && tmpfs_direct);
    WriteBlocks(**t, 0, 4, 4096);
    EXPECT_TRUE(ReadAndCheck(**t, 2, 4096).ok());
    (*t)->Shutdown();
  }
}

TEST(NvmeTier, ReadsStraightIntoAlignedBuffers) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr uint64_t kBytes = 64 * 1024;
  auto t = OpenNvmeTier(NvmeOptions(dir.path(), 8, kBytes), TierContext{kBytes});
  ASSERT_TRUE(t.ok());
  internal::AlignedBuffer src(kBytes), dst(kBytes);
  FillBlock(TestKey(1), 0, src.span());
  WriteOp w{TestKey(1), src.span()};
  ASSERT_TRUE((*t)->Write(kNs, std::span(&w, 1)).Wait().ok());
  ReadOp r{TestKey(1), dst.span()};
  ASSERT_TRUE((*t)->Read(kNs, std::span(&r, 1)).Wait().ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), kBytes), 0);
  (*t)->Shutdown();
}

// Reads and writes drop region pins that only reclaim waits for; the group
// committer sleeps on its own condition and wakes only for commits. Shared,
// every read woke it (and it then fought the read's completion for the tier
// lock): twice the thread switches of a read at queue depth 1.
TEST(NvmeTier, ReadsDoNotWakeTheCommitter) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  o.nvme.commit_interval_ms = 600000;  // no timed commit wakes it either
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok());
  WriteBlocks(**t, 0, 4, 8192);
  ASSERT_TRUE((*t)->Flush().ok());
  const uint64_t before = (*t)->TEST_CommitterWakeups();
  for (int round = 0; round < 50; ++round) {
    for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(ReadAndCheck(**t, i, 8192).ok());
  }
  // One wake-up of slack: the committer may still be on its way back to
  // sleep after the flush's commit when `before` is taken.
  EXPECT_LE((*t)->TEST_CommitterWakeups() - before, 1u);
  (*t)->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing

namespace kvtier::testing {
namespace {

TEST(NvmeConfig, ExampleKeysReachTheOptions) {
  auto c = LoadConfigFile(
      std::string(KVTIER_SOURCE_DIR) + "/config/examples/host-nvme.yaml",
      std::vector<std::string>{"tiers.ssd.reclaim=greedy", "tiers.ssd.io_timeout_ms=250",
                               "tiers.ssd.reinsert_hits=3"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const TierOptions& t = c->runtime.tiers[1];
  EXPECT_EQ(t.type, "nvme");
  EXPECT_EQ(t.path, "/var/tmp/kvtier-host-nvme.dat");
  EXPECT_EQ(t.region_bytes, 64 * kMiB);
  EXPECT_EQ(t.nvme.io_timeout_ms, 250u);
  EXPECT_EQ(t.nvme.queue_depth, 64u);
  EXPECT_EQ(t.nvme.commit_every_blocks, 64u);
  EXPECT_EQ(t.nvme.reclaim, "greedy");
  EXPECT_EQ(t.nvme.on_mismatch, "refuse");
  EXPECT_TRUE(t.nvme.direct_io);
  EXPECT_EQ(t.nvme.reinsert_hits, 3u);
  EXPECT_EQ(c->runtime.tiers[0].eviction, "reuse");  // the winning set (docs/BENCHMARKS.md)
  EXPECT_EQ(t.eviction, "reuse");
  EXPECT_EQ(t.admission, std::vector<std::string>{"reuse"});
  // The store is bound to the model's namespace.
  EXPECT_NE(t.nvme.store_namespace, 0u);
  EXPECT_EQ(t.nvme.store_namespace, ComputeNamespaceId(c->model.Namespace()).value);
  auto bad = LoadConfigFile(std::string(KVTIER_SOURCE_DIR) + "/config/examples/host-nvme.yaml",
                            std::vector<std::string>{"tiers.ssd.on_mismatch=ignore"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find("nvme.on_mismatch is 'ignore'; expected one of: refuse, wipe"),
      std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace kvtier::testing
