// kvtier-inspect nvme against a store the test writes through the NVMe tier
// on the build directory's file system: summary fields, verify on a good and
// on a corrupted store, and the lock that keeps it off a live store.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/inspect/inspect_cli_util.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using nlohmann::json;

constexpr uint64_t kBlock = 8192;
constexpr NamespaceId kNsA{1}, kNsB{2};

BlockKey Key(uint64_t i) { return BlockKey{i, i * 7 + 1}; }

std::vector<std::byte> Payload(uint64_t i, uint64_t bytes) {
  std::vector<std::byte> p(bytes);
  for (uint64_t j = 0; j < bytes; ++j) p[j] = static_cast<std::byte>((i * 131 + j) & 0xff);
  return p;
}

Status WriteBlocks(Tier& t, NamespaceId ns, uint64_t first, const std::vector<uint64_t>& sizes) {
  std::vector<std::vector<std::byte>> data;
  std::vector<WriteOp> ops;
  for (size_t i = 0; i < sizes.size(); ++i) data.push_back(Payload(first + i, sizes[i]));
  for (size_t i = 0; i < sizes.size(); ++i) ops.push_back({Key(first + i), data[i]});
  return t.Write(ns, ops).Wait();
}

// Edits the index at `dir` as a damaged or foreign one would hold it: each
// pair is put as is (raw key and value bytes).
void PutRecords(const std::string& dir,
                const std::vector<std::pair<std::string, std::string>>& kv) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  for (const auto& [k, v] : kv) ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), k, v).ok()) << k;
}

std::string GetRecord(const std::string& dir, const std::string& key) {
  rocksdb::DB* raw = nullptr;
  EXPECT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string value;
  EXPECT_TRUE(db && db->Get(rocksdb::ReadOptions(), key, &value).ok()) << key;
  return value;
}

class InspectNvme : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    options_ = NvmeOptions(dir_.path(), 16, kBlock);
    auto t = CreateTier(options_, TierContext{kBlock});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    // Namespace A: 6 full blocks; B: 3 full and one of 5000 bytes.
    ASSERT_TRUE(WriteBlocks(**t, kNsA, 0, std::vector<uint64_t>(6, kBlock)).ok());
    ASSERT_TRUE(WriteBlocks(**t, kNsB, 100, {kBlock, kBlock, kBlock, 5000}).ok());
    (*t)->Shutdown();  // commits the index and releases the store
  }
  CliRun Inspect(const std::string& args) { return RunInspect(dir_.path(), args); }
  std::string Data() const { return options_.path; }
  std::string Index() const { return options_.path + ".index"; }

  ScratchDir dir_;
  TierOptions options_;
};

TEST_F(InspectNvme, SummaryCountsBlocksBytesAndNamespaces) {
  CliRun r = Inspect("nvme " + Data() + " summary --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["index"], Data() + ".index");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["block_bytes"], kBlock);
  EXPECT_EQ(j["region_bytes"], 256 * 1024);
  EXPECT_EQ(j["regions"], 3);  // 16 blocks of 12 KiB on disk fit 1 region, + 2 spare
  EXPECT_EQ(j["regions_in_use"], 1);
  EXPECT_EQ(j["blocks"], 10);
  EXPECT_EQ(j["payload_bytes"], 9 * kBlock + 5000);
  EXPECT_EQ(j["disk_bytes"], 10 * (4096 + kBlock));
  EXPECT_EQ(j["stale_entries"], 0);
  EXPECT_EQ(j["bad_records"], 0);
  // Lifetime totals recorded by the tier in its index: every payload byte
  // admitted, and at least the header pages and padding on the device.
  EXPECT_EQ(j["host_bytes_written"], 9 * kBlock + 5000);
  EXPECT_GE(j["device_bytes_written"].get<uint64_t>(), uint64_t{10 * (4096 + kBlock)});
  EXPECT_DOUBLE_EQ(j["write_amplification"].get<double>(),
                   j["device_bytes_written"].get<double>() / (9 * kBlock + 5000));
  EXPECT_GT(j["write_amplification"].get<double>(), 1.0);
  EXPECT_EQ(j["namespaces"], json::parse(R"([
      {"id": "0000000000000001", "blocks": 6, "payload_bytes": 49152},
      {"id": "0000000000000002", "blocks": 4, "payload_bytes": 29576}])"));
  ASSERT_EQ(j["region_detail"].size(), 3u);
  int holding = 0;  // which region the tier picked is its business; all 10 share one
  for (const json& region : j["region_detail"]) {
    if (region["blocks"] == 0) continue;
    ++holding;
    EXPECT_EQ(region["blocks"], 10);
    EXPECT_EQ(region["disk_bytes"], 10 * (4096 + kBlock));
    EXPECT_GT(region["generation"], 0);
  }
  EXPECT_EQ(holding, 1);

  r = Inspect("nvme " + Data() + " summary");
  ASSERT_EQ(r.rc, 0) << r.err;
  // Column widths follow the longest label; compare with runs of spaces
  // collapsed.
  auto squeeze = [](std::string text) {
    std::string out;
    for (char c : text) {
      if (c == ' ' && !out.empty() && out.back() == ' ') continue;
      out += c;
    }
    return out;
  };
  const std::string got = squeeze(r.out);
  for (const std::string& want :
       {"nvme store " + Data() + "\nindex " + Data() + ".index\n\n",
        std::string("\nregions 3 (1 holding blocks)\nblocks 10\npayload bytes 78728\n"),
        std::string("\nhost bytes written 78728\n"),
        std::string("\n0000000000000001 6 49152\n0000000000000002 4 29576\n")}) {
    EXPECT_NE(got.find(want), std::string::npos) << want << "\n--- in ---\n" << r.out;
  }
}

TEST_F(InspectNvme, VerifyPassesThenNamesTheCorruptedBlock) {
  CliRun r = Inspect("nvme " + Data() + " verify");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "verified 10 blocks: 10 good, 0 corrupt\n");
  EXPECT_EQ(r.err, "") << "no progress bar off a terminal";

  // Where block B:101 lies, asked of the tier, then one payload byte flipped.
  uint64_t offset = 0;
  {
    auto t = internal::OpenNvmeTier(options_, TierContext{kBlock});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto at = (*t)->TEST_FileOffset(kNsB, Key(101));
    ASSERT_TRUE(at.has_value());
    offset = *at;
  }
  const int fd = open(Data().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char byte = 0;
  ASSERT_EQ(pread(fd, &byte, 1, static_cast<off_t>(offset + 4096 + 100)), 1);
  byte ^= 0xff;
  ASSERT_EQ(pwrite(fd, &byte, 1, static_cast<off_t>(offset + 4096 + 100)), 1);
  close(fd);

  r = Inspect("nvme " + Data() + " verify --json");
  ASSERT_EQ(r.rc, 1) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["blocks"], 10);
  EXPECT_EQ(j["good"], 9);
  ASSERT_EQ(j["corrupt"].size(), 1u);
  EXPECT_EQ(j["corrupt"][0]["namespace"], "0000000000000002");
  EXPECT_EQ(j["corrupt"][0]["key"], ToHex(Key(101)));
  EXPECT_EQ(j["corrupt"][0]["file_offset"], offset);
  EXPECT_EQ(j["corrupt"][0]["error"].get<std::string>().rfind("corruption: ", 0), 0u)
      << j["corrupt"][0]["error"];

  r = Inspect("nvme " + Data() + " verify");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("verified 10 blocks: 9 good, 1 corrupt\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0000000000000002:" + ToHex(Key(101))), std::string::npos) << r.out;
}

// On a terminal (util-linux `script` provides one) verify draws a bar on
// stderr; the pipe runs above saw none.
TEST_F(InspectNvme, VerifyDrawsProgressOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1)";
  const std::string log = dir_.path() + "/tty.log";
  const std::string cmd = "timeout 30 script -qec '" + std::string(KVTIER_INSPECT_BIN) +
                          " nvme " + Data() + " verify' " + log + " >/dev/null </dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string tty = SlurpFile(log);
  EXPECT_NE(tty.find("\rverify [" + std::string(40, '#') + "] 10/10 blocks\r\n"),
            std::string::npos)
      << tty;
  EXPECT_NE(tty.find("verified 10 blocks: 10 good, 0 corrupt"), std::string::npos) << tty;
}

TEST_F(InspectNvme, ALiveStoreIsRefusedUnlessReadOnly) {
  auto live = CreateTier(options_, TierContext{kBlock});
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  // A second tier on the same store is refused too.
  auto second = CreateTier(options_, TierContext{kBlock});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();

  for (const char* action : {"summary", "verify"}) {
    CliRun r = Inspect("nvme " + Data() + " " + action);
    EXPECT_EQ(r.rc, 2) << action;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "kvtier-inspect nvme: unavailable: nvme store " + Data() +
                         " is held by a live process; stop it first, or pass --read-only to "
                         "read it while it changes\n");
  }
  CliRun r = Inspect("nvme " + Data() + " summary --read-only --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["blocks"], 10);
  r = Inspect("nvme " + Data() + " verify --read-only");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "verified 10 blocks: 10 good, 0 corrupt\n");

  (*live)->Shutdown();
  EXPECT_EQ(Inspect("nvme " + Data() + " summary").rc, 0) << "released by shutdown";
}

// A record that does not decode is lost to the tier: verify fails on it.
TEST_F(InspectNvme, VerifyFailsOnUndecodableIndexRecords) {
  PutRecords(Index(), {{"B-not-a-block-key", "x"}});
  CliRun r = Inspect("nvme " + Data() + " verify --json");
  EXPECT_EQ(r.rc, 1) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["bad_records"], 1);
  EXPECT_EQ(j["corrupt_blocks"], 0);
  r = Inspect("nvme " + Data() + " verify");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out,
            "verified 10 blocks: 10 good, 0 corrupt\nindex: 1 bad records, 0 dropped entries "
            "(outside the store's geometry or the file, or overlapping another); the tier "
            "discards them\n");
  r = Inspect("nvme " + Data() + " summary --json");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["bad_records"], 1);
}

// Another format version means other records: refused, as the tier does.
TEST_F(InspectNvme, AnotherFormatVersionIsRefused) {
  auto meta = internal::DecodeMeta(GetRecord(Index(), "M"));
  ASSERT_TRUE(meta.has_value());
  meta->format_version = internal::kNvmeFormatVersion + 1;
  PutRecords(Index(), {{"M", internal::EncodeMeta(*meta)}});
  for (const char* action : {"summary", "verify"}) {
    CliRun r = Inspect("nvme " + Data() + " " + action);
    EXPECT_EQ(r.rc, 1) << action;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "kvtier-inspect nvme: invalid_argument: nvme index at " + Index() +
                         " has format version 2; this build reads format version 1 only\n");
  }
}

// Entries outside the geometry or overlapping another are not blocks: the
// summary counts what the tier keeps when it opens the store.
TEST_F(InspectNvme, EntriesTheTierDropsAreNotCounted) {
  using internal::BlockRecordKey;
  using internal::EncodeLocation;
  const std::string a0 = GetRecord(Index(), BlockRecordKey({kNsA, Key(0)}));
  auto loc = internal::DecodeLocation(a0);
  ASSERT_TRUE(loc.has_value());
  internal::BlockLocation misaligned = *loc, too_big = *loc, past = *loc;
  misaligned.offset += 512;
  too_big.payload_bytes = kBlock + 1;
  past.region = 99;
  PutRecords(Index(), {{BlockRecordKey({kNsA, Key(50)}), EncodeLocation(misaligned)},
                       {BlockRecordKey({kNsA, Key(51)}), EncodeLocation(too_big)},
                       {BlockRecordKey({kNsA, Key(52)}), EncodeLocation(past)},
                       // Where A:0 lies: the two overlap and both go.
                       {BlockRecordKey({kNsA, Key(53)}), a0}});
  CliRun r = Inspect("nvme " + Data() + " summary --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["blocks"], 9);
  EXPECT_EQ(j["dropped_entries"], 5);
  EXPECT_EQ(j["stale_entries"], 0);
  EXPECT_EQ(j["payload_bytes"], 8 * kBlock + 5000);
  EXPECT_EQ(j["namespaces"][0]["blocks"], 5);
  r = Inspect("nvme " + Data() + " verify --json");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(json::parse(r.out)["blocks"], 9);
  EXPECT_EQ(json::parse(r.out)["dropped_entries"], 5);
  // The tier agrees.
  auto t = internal::OpenNvmeTier(options_, TierContext{kBlock});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Stats().recovered_blocks, 9u);
  EXPECT_EQ((*t)->Stats().dropped_on_open, 5u);
}

// A data file truncated since: blocks past its end are dropped entries,
// as the tier drops them, not blocks the summary counts as held.
TEST_F(InspectNvme, BlocksPastATruncatedFileAreDroppedEntries) {
  std::vector<internal::NsKey> ids;
  for (uint64_t i = 0; i < 6; ++i) ids.push_back({kNsA, Key(i)});
  for (uint64_t i = 100; i < 104; ++i) ids.push_back({kNsB, Key(i)});
  uint64_t last = 0;  // the file offset of the block that lies last
  for (const internal::NsKey& id : ids) {
    auto loc = internal::DecodeLocation(GetRecord(Index(), internal::BlockRecordKey(id)));
    ASSERT_TRUE(loc.has_value());
    last = std::max(last, uint64_t{loc->region} * options_.region_bytes + loc->offset);
  }
  ASSERT_EQ(::truncate(Data().c_str(), static_cast<off_t>(last)), 0);
  CliRun r = Inspect("nvme " + Data() + " summary --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["blocks"], 9);
  EXPECT_EQ(j["dropped_entries"], 1);
  r = Inspect("nvme " + Data() + " verify");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("verified 9 blocks: 9 good, 0 corrupt"), std::string::npos) << r.out;
  auto t = internal::OpenNvmeTier(options_, TierContext{kBlock});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Stats().recovered_blocks, 9u);
  EXPECT_EQ((*t)->Stats().dropped_on_open, 1u);
}

// The summary reads the index alone: an --index of another store with the
// same layout is caught by the headers of a few blocks it lists.
TEST_F(InspectNvme, SummaryRefusesAnotherStoresIndex) {
  TierOptions other = NvmeOptions(dir_.path() + "/other", 16, kBlock);
  std::filesystem::create_directories(dir_.path() + "/other");
  {
    auto t = CreateTier(other, TierContext{kBlock});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(WriteBlocks(**t, kNsA, 500, std::vector<uint64_t>(10, kBlock)).ok());
    (*t)->Shutdown();
  }
  CliRun r = Inspect("nvme " + Data() + " summary --index " + other.path + ".index");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("none of 8 blocks sampled from the index at " + other.path +
                       ".index has its header in the data file"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  // Its own index passes, and so does the other store with its own.
  EXPECT_EQ(Inspect("nvme " + Data() + " summary --index " + Index()).rc, 0);
  EXPECT_EQ(Inspect("nvme " + other.path + " summary").rc, 0);
}

TEST_F(InspectNvme, MissingStoreIsBad) {
  CliRun r = Inspect("nvme " + dir_.path() + "/nothing summary");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err,
            "kvtier-inspect nvme: not_found: no nvme data file at " + dir_.path() + "/nothing\n");
}

}  // namespace
}  // namespace kvtier::testing
