// kvtier-bench host, nvme, nvme-path, remote and growth: options refused with a clear message,
// sizes the tiers must hold, and buffers that cannot be had.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tools/bench/aligned_buffer.h"
#include "tools/bench/growth_bench.h"
#include "tools/bench/host_bench.h"
#include "tools/bench/nvme_bench.h"
#include "tools/bench/nvme_path_bench.h"
#include "tools/bench/remote_bench.h"

namespace kvtier::bench {
namespace {

// With the defaults (1 MiB blocks, 4 per batch, 2 batches in flight) one
// round of windows is 8 MiB: a smaller --total left windows unused, and their
// zero bytes failed the read-back check as a false Corruption.
TEST(RemoteBenchOptionsTest, TotalMustCoverOneRoundOfWindows) {
  RemoteBenchOptions o;
  EXPECT_TRUE(o.Validate().ok());
  for (uint64_t total : {uint64_t{0}, uint64_t{4} << 20, (uint64_t{8} << 20) - 1}) {
    o.total_bytes = total;
    Status st = o.Validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << total;
    EXPECT_NE(st.message().find("--total " + std::to_string(total) + " is less than one round"),
              std::string_view::npos)
        << st.message();
    EXPECT_NE(st.message().find("8388608 bytes"), std::string_view::npos) << st.message();
  }
  o.total_bytes = uint64_t{8} << 20;
  EXPECT_TRUE(o.Validate().ok());
  o.total_bytes = 4096;
  o.block_bytes = 512;
  o.queue_depth = 4;
  o.batches_in_flight = 2;
  EXPECT_TRUE(o.Validate().ok());
}

// The host arena rounds every slot up to 4 KiB: a 64000-byte block takes
// 65536 bytes, which a capacity of blocks x 64000 does not cover ("tier is
// full" before the fix).
TEST(HostBenchTest, BlockSizeNotAMultipleOf4KiBFits) {
  HostBenchOptions o;
  o.block_sizes = {64000, 4096 + 1};
  o.total_bytes = 1 << 20;
  o.rounds = 1;
  o.working_set_bytes = 0;  // the minimum of 64 blocks
  Result<std::vector<HostBenchRow>> rows = RunHostBench(o);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].block_bytes, 64000u);
  EXPECT_EQ((*rows)[0].working_set_blocks, 64u);
  EXPECT_GT((*rows)[0].tier_mb_s, 0);
  EXPECT_GT((*rows)[1].memcpy_mb_s, 0);
}

// A block size no machine can hold is an error, not a crash on a null buffer.
TEST(HostBenchTest, HugeBlockSizeIsResourceExhausted) {
  HostBenchOptions o;
  o.block_sizes = {uint64_t{1} << 50};
  o.rounds = 1;
  Result<std::vector<HostBenchRow>> rows = RunHostBench(o);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), StatusCode::kResourceExhausted) << rows.status().ToString();
}

// Each structure ends with every block fed to it, one call per request;
// the peer is the last row.
TEST(GrowthBenchTest, FeedsEveryStructureTheSameBlocks) {
  GrowthBenchOptions o;
  o.blocks = 1000;
  o.blocks_per_request = 64;  // 15 requests: the last 40 blocks do not make one
  auto rows = RunGrowthBench(o);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 4u);
  for (const GrowthBenchRow& r : *rows) {
    EXPECT_EQ(r.entries, 15u * 64) << r.what;
    EXPECT_EQ(r.calls, 15u) << r.what;
    EXPECT_GE(r.longest_ms, r.p999_ms) << r.what;
  }
  EXPECT_EQ(rows->back().what, "one std::unordered_map (peer)");
}

TEST(GrowthBenchTest, RefusesSizesItCannotRun) {
  GrowthBenchOptions o;
  o.blocks_per_request = 0;
  EXPECT_EQ(o.Validate().message(), "--blocks must be at least --blocks-per-request (>= 1)");
  o.blocks_per_request = 64;
  o.blocks = 63;
  EXPECT_FALSE(o.Validate().ok());
  o.blocks = (uint64_t{1} << 23) + 1;
  EXPECT_EQ(o.Validate().message(), "--blocks is at most 2^23 (the learners' bound)");
  EXPECT_FALSE(RunGrowthBench(o).ok());
}

TEST(AlignedBufferTest, AllocatesAlignedOrRefusesWithTheSize) {
  Result<AlignedBuffer> small = AlignedBuffer::Allocate(5000);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->size(), 5000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small->data()) % 4096, 0u);
  for (uint64_t bad : {uint64_t{0}, uint64_t{1} << 62, UINT64_MAX}) {
    Result<AlignedBuffer> b = AlignedBuffer::Allocate(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(b.status().message().find(std::to_string(bad) + " bytes"), std::string_view::npos)
        << b.status().message();
  }
}

TEST(FioOutputTest, MissingOrMistypedFieldsAreClearErrors) {
  Result<double> ok = ParseFioBandwidth(R"({"jobs":[{"write":{"bw_bytes":1234.5}}]})", "write");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_DOUBLE_EQ(*ok, 1234.5);
  const std::pair<const char*, const char*> cases[] = {
      {"fio: engine not found", "no JSON result"},
      {"[1,2]", "no jobs[0]"},
      {R"({"jobs":[]})", "no jobs[0]"},
      {R"({"jobs":[{"read":{"bw_bytes":1}}]})", "no jobs[0].write"},
      {R"({"jobs":[{"write":{}}]})", "no number jobs[0].write.bw_bytes"},
      {R"({"jobs":[{"write":{"bw_bytes":"fast"}}]})", "no number jobs[0].write.bw_bytes"},
  };
  for (const auto& [json, why] : cases) {
    Result<double> r = ParseFioBandwidth(json, "write");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
    EXPECT_NE(r.status().message().find(why), std::string_view::npos) << r.status().message();
  }
}

// Writes an executable stand-in for fio at `fio`: it answers --version as
// fio-fake-1 and runs `body` (sh) for every job. False when it cannot.
bool WriteFakeFio(const std::filesystem::path& fio, const std::string& body) {
  {
    std::ofstream f(fio);
    f << "#!/bin/sh\n"
         "if [ \"$1\" = --version ]; then echo fio-fake-1; exit 0; fi\n"
      << body;
    if (!f) return false;
  }
  return chmod(fio.c_str(), 0755) == 0;
}

// The smallest benchmark run: one 4 KiB block size at queue depth 1, four
// blocks, one round, in `dir` with the fio at `fio`.
NvmeBenchOptions TinyNvmeBench(const std::filesystem::path& dir, const std::filesystem::path& fio) {
  NvmeBenchOptions o;
  o.dir = dir.string();
  o.fio = fio.string();
  o.block_sizes = {4096};
  o.queue_depths = {1};
  o.total_bytes = 4 * 4096;
  o.rounds = 1;
  return o;
}

// A stand-in fio in a directory whose name holds a space and a quote (a
// shell command line built from it broke), printing JSON without the
// bandwidth: RunNvmeBench fails with a message, not an exception.
TEST(FioOutputTest, RunNvmeBenchReportsAFioResultWithoutBandwidth) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("kvtier fio 'test' " + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path fio = dir / "fake fio";
  ASSERT_TRUE(WriteFakeFio(fio, "echo '{\"jobs\":[{\"write\":{}}]}'\n"));
  Result<NvmeBenchReport> r = RunNvmeBench(TinyNvmeBench(dir, fio));
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
  EXPECT_NE(r.status().message().find("jobs[0].write.bw_bytes"), std::string_view::npos)
      << r.status().ToString();
}

// --fio-fdatasync N reaches fio's write jobs as --fdatasync=N, never its
// reads, and the report says which peer it compared against.
TEST(FioOutputTest, FdatasyncGoesToFioWritesOnly) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("kvtier-fio-sync-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path fio = dir / "fio";
  const std::filesystem::path calls = dir / "calls";
  ASSERT_TRUE(WriteFakeFio(
      fio, "echo \"$*\" >> '" + calls.string() +
               "'\n"
               "echo '{\"jobs\":[{\"write\":{\"bw_bytes\":1e9},\"read\":{\"bw_bytes\":1e9}}]}'\n"));
  NvmeBenchOptions o = TinyNvmeBench(dir, fio);
  o.fio_fdatasync = 64;
  Result<NvmeBenchReport> r = RunNvmeBench(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::ifstream in(calls);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("--rw=write"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("--fdatasync=64"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("--rw=read"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[1].find("fdatasync"), std::string::npos) << lines[1];
  EXPECT_NE(FormatNvmeBench(*r).find("--fdatasync=64 on writes"), std::string::npos)
      << FormatNvmeBench(*r);
  EXPECT_NE(NvmeBenchJson(*r).find("\"fio_fdatasync\":64"), std::string::npos);
}

// nvme-path reads the same blocks four ways and reports them in order, each
// against the first; sizes it cannot use are refused before any file is made.
TEST(NvmePathBenchTest, ReportsEachWayAgainstTheRingAndRefusesBadSizes) {
  const std::filesystem::path dir =
      std::filesystem::path(KVTIER_BINARY_DIR) / ("kvtier-path-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  NvmePathOptions o;
  o.dir = dir.string();
  o.block_bytes = 64 << 10;
  o.total_bytes = 8 * o.block_bytes;
  o.rounds = 2;
  Result<NvmePathReport> r = RunNvmePathBench(o);
  if (r.status().code() == StatusCode::kNotSupported) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << r.status().ToString();
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reads, 8u);
  ASSERT_EQ(r->rows.size(), 4u);
  const char* ways[] = {"ring", "ring+hash", "engine", "tier"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r->rows[i].step, ways[i]);
    EXPECT_GT(r->rows[i].us_per_read, 0);
    EXPECT_DOUBLE_EQ(r->rows[i].vs_ring, r->rows[i].us_per_read / r->rows[0].us_per_read);
  }
  EXPECT_NE(FormatNvmePath(*r).find("64 KiB blocks"), std::string::npos) << FormatNvmePath(*r);
  // Nothing is left behind in the directory it was given.
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);

  for (auto [bs, total] :
       {std::pair<uint64_t, uint64_t>{0, 1 << 20}, {1000, 1 << 20}, {64 << 10, 3 * (64 << 10)}}) {
    o.block_bytes = bs;
    o.total_bytes = total;
    Status st = RunNvmePathBench(o).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bs << " " << total;
  }
  o.block_bytes = 64 << 10;
  o.total_bytes = 8 * o.block_bytes;
  o.rounds = 0;
  EXPECT_NE(RunNvmePathBench(o).status().message().find("--rounds"), std::string_view::npos);
}

}  // namespace
}  // namespace kvtier::bench
