// The NVMe index's RocksDB log and damaged-index messages: RocksDB writes
// no log file of its own on the index's disk (its file logger aborted the
// process once a write to a full disk had failed, and at every later open)
// and speaks through the tier's log instead; an index missing its files, or
// a store held by an offline reader, is named as such.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "tests/support/recording_log.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_index.h"
#include "tiers/nvme/nvme_offline.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::NvmeOfflineStore;
using internal::OpenNvmeTier;

constexpr uint64_t kBytes = 16 * 1024;

// Writes a few blocks into a store at `dir` and closes it.
void MakeStore(const TierOptions& o, const std::shared_ptr<LogSink>& log) {
  auto t = OpenNvmeTier(o, TierContext{kBytes, SystemClock(), log, {}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WriteBlocks(**t, 0, 4, kBytes);
  (*t)->Shutdown();
}

bool HasRocksLogFile(const std::string& dir) {
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().filename().string().rfind("LOG", 0) == 0) return true;
  }
  return false;
}

TEST(NvmeIndexLog, RocksDbWritesNoLogFileAndSpeaksThroughTheTiersLog) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = NvmeOptions(dir.path(), 16, kBytes);
  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "nvme index (rocksdb)");
  ASSERT_NO_FATAL_FAILURE(MakeStore(o, log));
  const std::string index = o.path + ".index";
  EXPECT_FALSE(HasRocksLogFile(index));
  {
    auto offline = NvmeOfflineStore::Open(o.path, "", /*ignore_lock=*/false);
    ASSERT_TRUE(offline.ok()) << offline.status().ToString();
  }
  EXPECT_FALSE(HasRocksLogFile(index)) << "the offline reader wrote one";

  // Damaged: CURRENT gone. The tier refuses, and RocksDB's reason for it
  // reaches the tier's log.
  std::filesystem::remove(index + "/CURRENT");
  auto reopen_log = std::make_shared<RecordingLog>(LogLevel::kWarning, "nvme index (rocksdb)");
  auto t = OpenNvmeTier(o, TierContext{kBytes, SystemClock(), reopen_log, {}});
  EXPECT_FALSE(t.ok());
  EXPECT_FALSE(reopen_log->lines().empty()) << "RocksDB's warnings went nowhere";
  EXPECT_FALSE(HasRocksLogFile(index));
}

// A store's first open is no fault: RocksDB used to log an error for the
// index directory it was about to create, which reached engines' logs.
TEST(NvmeIndexLog, AFreshStoreLogsNothing) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = NvmeOptions(dir.path(), 16, kBytes);
  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "");
  ASSERT_NO_FATAL_FAILURE(MakeStore(o, log));
  ASSERT_NO_FATAL_FAILURE(MakeStore(o, log));
  for (const std::string& line : log->lines()) ADD_FAILURE() << line;
}

TEST(NvmeIndexLog, AnIndexMissingItsFilesIsCalledDamaged) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = NvmeOptions(dir.path(), 16, kBytes);
  ASSERT_NO_FATAL_FAILURE(MakeStore(o, nullptr));
  ASSERT_NO_FATAL_FAILURE(MakeStore(o, nullptr));
  std::filesystem::remove(o.path + ".index/CURRENT");
  auto offline = NvmeOfflineStore::Open(o.path, "", /*ignore_lock=*/false);
  ASSERT_FALSE(offline.ok());
  // Was NotFound, "no nvme index at ...", though the directory is there.
  EXPECT_EQ(offline.status().code(), StatusCode::kCorruption) << offline.status().ToString();
  EXPECT_NE(offline.status().message().find("is damaged or incomplete (files missing)"),
            std::string_view::npos)
      << offline.status().ToString();
  // No directory at all is still "no index".
  std::filesystem::remove_all(o.path + ".index");
  auto none = NvmeOfflineStore::Open(o.path, "", /*ignore_lock=*/false);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().ToString();
}

TEST(NvmeIndexLog, AStoreHeldByAnOfflineReaderSaysSo) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = NvmeOptions(dir.path(), 16, kBytes);
  ASSERT_NO_FATAL_FAILURE(MakeStore(o, nullptr));
  auto offline = NvmeOfflineStore::Open(o.path, "", /*ignore_lock=*/false);
  ASSERT_TRUE(offline.ok()) << offline.status().ToString();
  auto t = OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("an open tier, or an offline reader such as kvtier-inspect"),
            std::string_view::npos)
      << t.status().ToString();
}

}  // namespace
}  // namespace kvtier::testing
