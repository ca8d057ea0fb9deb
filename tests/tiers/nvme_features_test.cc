// The NVMe tier's registered host memory (io_uring fixed buffers), hot-block
// reinsertion on reclaim, and the namespace recorded in the store.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "tests/support/block_data.h"
#include "tests/support/nvme_fault_engine.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::AlignedBuffer;
using internal::OpenNvmeTier;

constexpr NamespaceId kNs = kNvmeNs;

Status WriteOne(Tier& t, uint64_t i, std::span<std::byte> src) {
  FillBlock(TestKey(i), 0, src);
  WriteOp w{TestKey(i), src};
  return t.Write(kNs, std::span(&w, 1)).Wait();
}

Status ReadOne(Tier& t, uint64_t i, std::span<std::byte> dst) {
  std::memset(dst.data(), 0xEE, dst.size());
  ReadOp r{TestKey(i), dst};
  Status st = t.Read(kNs, std::span(&r, 1)).Wait();
  if (st.ok()) EXPECT_TRUE(std::ranges::equal(dst, BlockBytes(TestKey(i), dst.size()))) << i;
  return st;
}

// Blocks 0..7 leave from and 8..15 land in arena slots (fixed buffers);
// the others use plain aligned buffers. Every byte must match either way,
// and a restart without registration reads the same bytes.
TEST(NvmeFixedBuffers, RegisteredAndPlainBuffersRoundTripByteForByte) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr uint64_t kBytes = 64 * 1024, kSlots = 8;
  TierOptions o = NvmeOptions(dir.path(), 32, kBytes, 1 << 20);
  auto t = OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  AlignedBuffer arena(kSlots * kBytes), plain(kBytes);
  auto slot = [&](uint64_t i) { return arena.span().subspan((i % kSlots) * kBytes, kBytes); };
  // 512 KiB: within even an unprivileged 8 MiB locked-memory limit.
  EXPECT_EQ((*t)->RegisterHostMemory(arena.span()), kSlots * kBytes);
  EXPECT_EQ((*t)->RegisterHostMemory(arena.span()), 0u) << "registration happens once";
  internal::NvmeStats st = (*t)->Stats();
  EXPECT_TRUE(st.fixed_file);
  EXPECT_EQ(st.registered_bytes, kSlots * kBytes);
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(WriteOne(**t, i, i < 8 ? slot(i) : plain.span()).ok()) << i;
  }
  EXPECT_EQ((*t)->Stats().fixed_buffer_ios, 8u);  // one per registered payload
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(ReadOne(**t, i, i < 8 ? plain.span() : slot(i)).ok()) << i;
  }
  EXPECT_EQ((*t)->Stats().fixed_buffer_ios, 16u);
  EXPECT_EQ((*t)->Stats().corruptions, 0u);
  (*t)->Shutdown();

  auto again = OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(ReadOne(**again, i, slot(i)).ok()) << i;
  EXPECT_EQ((*again)->Stats().registered_bytes, 0u);
  EXPECT_EQ((*again)->Stats().fixed_buffer_ios, 0u);
  (*again)->Shutdown();
}

// The same faults the fault suite injects, on blocks whose payload moves as
// its own fixed-buffer request beside the header page's: the block gets the
// first part's error or Corruption, never wrong bytes, never a hang.
TEST(NvmeFixedBuffers, FaultsOnSplitRequestsFailTheBlockNeverCorruptIt) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr uint64_t kBytes = 16 * 1024;
  IoFaults faults;
  TierOptions o = NvmeOptions(dir.path(), 32, kBytes);
  o.nvme.io_timeout_ms = 200;
  auto t = OpenNvmeWithFaults(o, kBytes, &faults);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  AlignedBuffer arena(4 * kBytes);
  ASSERT_EQ((*t)->RegisterHostMemory(arena.span()), 4 * kBytes);
  auto slot = [&](uint64_t i) { return arena.span().subspan(i * kBytes, kBytes); };
  auto offset = [&](uint64_t i) { return std::to_string(*(*t)->TEST_FileOffset(kNs, TestKey(i))); };

  faults.write_errno = EIO;
  Status w = WriteOne(**t, 0, slot(0));
  EXPECT_EQ(w.code(), StatusCode::kIOError) << w.ToString();
  EXPECT_EQ((*t)->Usage().blocks, 0u);
  faults.write_errno = 0;
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(WriteOne(**t, i, slot(i)).ok()) << i;

  faults.read_errno = EIO;
  EXPECT_EQ(ReadOne(**t, 0, slot(3)).ToString(),
            "io_error: fault engine read at offset " + offset(0) + ": Input/output error");
  faults.read_errno = 0;
  faults.torn_reads = true;
  EXPECT_EQ(ReadOne(**t, 1, slot(3)).code(), StatusCode::kCorruption);
  faults.torn_reads = false;
  EXPECT_EQ(ReadOne(**t, 1, slot(3)).code(), StatusCode::kNotFound) << "a corrupt block is dropped";
  faults.stall_reads = true;
  EXPECT_EQ(ReadOne(**t, 2, slot(3)).ToString(),
            "deadline_exceeded: io_uring read at offset 18446744073709551615: no completion "
            "within 200 ms");
  faults.stall_reads = false;
  for (uint64_t i : {0, 2}) EXPECT_TRUE(ReadOne(**t, i, slot(3)).ok()) << i;
  EXPECT_EQ((*t)->Stats().corruptions, 1u);
  (*t)->Shutdown();
}

// Three blocks fill a region exactly; 12 blocks of capacity give 6 regions,
// one of them the spare. After 15 writes (3 removed first) and 1 removal,
// block 15 needs a region: FIFO reclaim takes the one of blocks 0, 1, 2.
// Block 0 was read twice (hot at reinsert_hits 2), block 1 once, block 2
// never: 0 is rewritten, 1 and 2 are evicted.
TEST(NvmeReinsert, ReclaimRewritesHotBlocksAndEvictsColdOnes) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr uint64_t kBytes = 16 * 1024, kDisk = 20 * 1024;
  TierOptions o = NvmeOptions(dir.path(), 12, kBytes, 3 * kDisk);
  o.nvme.reinsert_hits = 2;
  LostCopies lost;
  TierContext context{kBytes};
  context.copies_lost = lost.Sink();
  auto t = OpenNvmeTier(o, context);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ((*t)->Stats().regions, 6u);
  WriteBlocks(**t, 0, 12, kBytes);
  for (uint64_t i : {0, 0, 1, 4, 4, 4}) ASSERT_TRUE(ReadAndCheck(**t, i, kBytes).ok());
  const std::vector<BlockKey> gone = {TestKey(9), TestKey(10), TestKey(11)};
  ASSERT_TRUE((*t)->Remove(kNs, gone).Wait().ok());
  WriteBlocks(**t, 12, 3, kBytes);
  const BlockKey eight = TestKey(8);
  ASSERT_TRUE((*t)->Remove(kNs, std::span(&eight, 1)).Wait().ok());
  EXPECT_EQ((*t)->Stats().reclaims, 0u);
  WriteBlocks(**t, 15, 1, kBytes);

  internal::NvmeStats st = (*t)->Stats();
  EXPECT_EQ(st.reclaims, 1u);
  EXPECT_EQ(st.reinserted_blocks, 1u);
  EXPECT_EQ(st.bytes_reinserted, kDisk);
  EXPECT_EQ(st.evicted_blocks, 2u);
  EXPECT_EQ(st.bytes_evicted, 2 * kDisk);
  EXPECT_EQ(st.bytes_reclaimed, 2 * kDisk);  // the victim's 3 blocks less the rewritten one
  EXPECT_EQ(st.corruptions, 0u);
  EXPECT_EQ((*t)->Usage().blocks, 10u);  // 0, 3..7, 12..15
  // The evicted blocks are reported lost: the runtime still indexed them here.
  EXPECT_EQ(lost.Taken(),
            (std::vector<std::pair<NamespaceId, BlockKey>>{{kNs, TestKey(1)}, {kNs, TestKey(2)}}));
  auto expect_after = [&](Tier& tier) {
    for (uint64_t i : {0, 3, 4, 5, 6, 7, 12, 13, 14, 15}) {
      EXPECT_TRUE(ReadAndCheck(tier, i, kBytes).ok()) << i;
    }
    for (uint64_t i : {1, 2, 8, 9, 10, 11}) {
      EXPECT_EQ(ReadAndCheck(tier, i, kBytes).code(), StatusCode::kNotFound) << i;
    }
  };
  expect_after(**t);
  (*t)->Shutdown();
  auto again = OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  expect_after(**again);
  (*again)->Shutdown();
}

TEST(NvmeReinsert, DefaultKeepsEveryLiveBlock) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr uint64_t kBytes = 16 * 1024, kDisk = 20 * 1024;
  TierOptions o = NvmeOptions(dir.path(), 12, kBytes, 3 * kDisk);
  auto t = OpenNvmeTier(o, TierContext{kBytes});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WriteBlocks(**t, 0, 12, kBytes);
  const std::vector<BlockKey> gone = {TestKey(1), TestKey(9), TestKey(10), TestKey(11)};
  ASSERT_TRUE((*t)->Remove(kNs, gone).Wait().ok());
  WriteBlocks(**t, 12, 4, kBytes);  // the fourth needs a region: reclaim of 0, 2
  internal::NvmeStats st = (*t)->Stats();
  EXPECT_EQ(st.reclaims, 1u);
  EXPECT_EQ(st.reinserted_blocks, 2u);
  EXPECT_EQ(st.bytes_reinserted, 2 * kDisk);
  EXPECT_EQ(st.evicted_blocks, 0u);
  for (uint64_t i : {0, 2, 3, 12, 15}) EXPECT_TRUE(ReadAndCheck(**t, i, kBytes).ok()) << i;
  (*t)->Shutdown();
}

TEST(NvmeNamespace, StoreOfAnotherNamespaceIsRefusedOrWiped) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 16, 8192);
  for (uint64_t ns : {0x00, 0xAA}) {  // written unbound, then bound by the first to name one
    o.nvme.store_namespace = ns;
    auto t = OpenNvmeTier(o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    if (ns == 0) WriteBlocks(**t, 0, 4, 8192);
    EXPECT_EQ(ns == 0 ? (*t)->Usage().blocks : (*t)->Stats().recovered_blocks, 4u);
    (*t)->Shutdown();
  }
  o.nvme.store_namespace = 0xBB;
  auto refused = OpenNvmeTier(o, TierContext{8192});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString(),
            "invalid_argument: tier 'ssd': nvme store at " + dir.path() +
                "/data.index was written for another namespace (another model, weights "
                "revision, dtype, layout or TP rank: namespace 0x00000000000000aa != "
                "0x00000000000000bb); set 'on_mismatch: wipe' to discard it");
  for (uint64_t ns : {0xAA, 0x00}) {  // the bound one, and an unbound reader, open it
    o.nvme.store_namespace = ns;
    auto t = OpenNvmeTier(o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->Stats().recovered_blocks, 4u);
    EXPECT_TRUE(ReadAndCheck(**t, 3, 8192).ok());
    (*t)->Shutdown();
  }
  o.nvme.store_namespace = 0xBB;
  o.nvme.on_mismatch = "wipe";
  {
    auto t = OpenNvmeTier(o, TierContext{8192});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->Stats().recovered_blocks, 0u);
    EXPECT_EQ(ReadAndCheck(**t, 3, 8192).code(), StatusCode::kNotFound);
    WriteBlocks(**t, 7, 1, 8192);
    (*t)->Shutdown();
  }
  o.nvme.on_mismatch = "refuse";  // now recorded as 0xBB
  auto t = OpenNvmeTier(o, TierContext{8192});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(ReadAndCheck(**t, 7, 8192).ok());
  (*t)->Shutdown();
}

TEST(NvmeNamespace, MetaRecordsTheNamespaceAndReadsOldRecordsAsUnbound) {
  internal::StoreMeta m{internal::kNvmeFormatVersion, 8192, 1 << 20, 7, 0x1234};
  const std::string enc = internal::EncodeMeta(m);
  EXPECT_EQ(internal::DecodeMeta(enc), m);
  // A record written before the namespace was recorded: 8 bytes shorter.
  auto old = internal::DecodeMeta(std::string_view(enc).substr(0, enc.size() - 8));
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->namespace_id, 0u);
  EXPECT_EQ(old->regions, 7u);
  EXPECT_FALSE(internal::DecodeMeta(enc.substr(0, enc.size() - 1)).has_value());
  EXPECT_EQ(internal::DescribeMismatch(*old, m),
            "namespace 0x0000000000000000 != 0x0000000000001234");
}

// A meta record read back is checked before anything is sized from it: a
// damaged one asked kvtier-inspect for terabytes. And a location whose
// payload size is near 2^64 does not fit (DiskBytes of it wraps).
TEST(NvmeFormat, MetaOutOfRangeIsCorruptionAndHugePayloadsDoNotFit) {
  using internal::StoreMeta;
  const uint32_t v = internal::kNvmeFormatVersion;
  EXPECT_TRUE(internal::CheckStoreMeta(StoreMeta{v, 8192, 1 << 20, 7, 0}).ok());
  for (const StoreMeta& bad :
       {StoreMeta{v, 0, 1 << 20, 7, 0}, StoreMeta{v, 8192, 1000, 7, 0},
        StoreMeta{v, 8192, 4ULL << 30, 7, 0}, StoreMeta{v, 1ULL << 40, 1 << 20, 7, 0},
        StoreMeta{v, ~0ULL, 1 << 20, 7, 0}, StoreMeta{v, 8192, 1 << 20, 0, 0},
        StoreMeta{v, 8192, 1 << 20, 0xFFFFFFFF, 0}}) {
    Status st = internal::CheckStoreMeta(bad);
    EXPECT_EQ(st.code(), StatusCode::kCorruption)
        << bad.block_bytes << " " << bad.region_bytes << " " << bad.regions;
  }
  internal::BlockLocation loc;
  loc.payload_bytes = ~0ULL;
  EXPECT_FALSE(internal::LocationFits(loc, ~0ULL, 1 << 20, 7));
  loc.payload_bytes = 8192;
  EXPECT_TRUE(internal::LocationFits(loc, 8192, 1 << 20, 7));
}

// A capacity that would need more regions than a store may have is refused
// at open, before any file is made: the count wrapped at 32 bits and the
// tier opened with 3 regions in place of 4 billion.
TEST(NvmeFormat, ACapacityNeedingTooManyRegionsIsRefused) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  TierOptions o = NvmeOptions(dir.path(), 1, 65536, 69632);
  o.capacity_bytes = 264917625208832;  // about 241 TiB
  auto t = OpenNvmeTier(o, TierContext{65536});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
  EXPECT_NE(t.status().message().find("raise region_size"), std::string_view::npos)
      << t.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(o.path));
}

}  // namespace
}  // namespace kvtier::testing
