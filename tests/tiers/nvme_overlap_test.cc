// The NVMe tier opening an index whose entries overlap on disk (a damaged or
// foreign index; the tier never writes such entries): every entry involved
// in an overlap is dropped at open, no read returns wrong bytes, and a
// reclaim of the region afterwards reads only what fits its buffer.
#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/block_data.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_index.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::BlockLocation;
using internal::NsKey;
using internal::NvmeIndex;
using internal::NvmeTier;
using internal::OpenNvmeTier;

constexpr NamespaceId kNs = kNvmeNs;
// Three blocks fill a region; 12 blocks of capacity give 6 regions.
constexpr uint64_t kBytes = 16 * 1024, kDisk = 20 * 1024, kBlocks = 12;
constexpr uint64_t kPage = 4096;

std::unique_ptr<NvmeTier> Open(const TierOptions& o) {
  auto t = OpenNvmeTier(o, TierContext{kBytes});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Where block 2's forged entry points, relative to block 0's location:
// `offset` bytes further into the region, `payload` bytes long.
struct Forged {
  uint64_t offset = 0;
  uint64_t payload = 0;
};

// Writes blocks 0 and 1 (one region, offsets 0 and kDisk), closes the tier,
// then records block 2 at `forged` in the index behind the tier's back.
void WriteAndForge(const TierOptions& o, Forged forged) {
  {
    std::unique_ptr<NvmeTier> t = Open(o);
    ASSERT_NE(t, nullptr);
    WriteBlocks(*t, 0, 2, kBytes);
    const std::optional<uint64_t> a = t->TEST_FileOffset(kNs, TestKey(0));
    const std::optional<uint64_t> b = t->TEST_FileOffset(kNs, TestKey(1));
    ASSERT_TRUE(a && b);
    ASSERT_EQ(*a % o.region_bytes, 0u);
    ASSERT_EQ(*b, *a + kDisk) << "both blocks in one region, back to back";
    t->Shutdown();
  }
  const std::string dir = o.path + ".index";
  internal::StoreMeta meta;
  {
    auto ro = NvmeIndex::OpenReadOnly(dir, &meta);
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  }
  bool wiped = false;
  auto index = NvmeIndex::Open(dir, meta, false, internal::DataFound::kData, nullptr, &wiped);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_FALSE(wiped);
  std::optional<BlockLocation> first;
  uint64_t bad = 0;
  ASSERT_TRUE((*index)
                  ->Scan([](uint32_t, uint64_t) {},
                         [&](const NsKey& id, const BlockLocation& loc) {
                           if (id.key == TestKey(0)) first = loc;
                         },
                         &bad)
                  .ok());
  ASSERT_TRUE(first.has_value());
  BlockLocation loc = *first;  // same region and generation: passes every other check
  loc.offset += static_cast<uint32_t>(forged.offset);
  loc.payload_bytes = forged.payload;
  ASSERT_TRUE((*index)->Apply({{NsKey{kNs, TestKey(2)}, loc}}).ok());
}

// Each block reads back exactly or is NotFound; returns those found.
std::vector<uint64_t> Readable(Tier& t, std::initializer_list<uint64_t> blocks) {
  std::vector<uint64_t> found;
  for (uint64_t i : blocks) {
    const Status st = ReadAndCheck(t, i, kBytes);
    EXPECT_TRUE(st.ok() || st.code() == StatusCode::kNotFound) << i << ": " << st.ToString();
    if (st.ok()) found.push_back(i);
  }
  return found;
}

// Reopens over the forged index and checks what survived, then makes the
// tier reclaim before anything is read (a read that fails its check drops
// the entry): blocks 100.. are written one at a time, the oldest removed
// once six are live, until a write finds no free region. FIFO reclaim then
// takes the oldest sealed region: the one of blocks 0 and 1 when anything of
// it was kept.
void ExpectOverlapsDropped(Forged forged, uint64_t dropped, const std::vector<uint64_t>& kept) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const TierOptions o = NvmeOptions(dir.path(), kBlocks, kBytes, 3 * kDisk);
  ASSERT_NO_FATAL_FAILURE(WriteAndForge(o, forged));
  std::unique_ptr<NvmeTier> t = Open(o);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Stats().dropped_on_open, dropped);
  EXPECT_EQ(t->Stats().recovered_blocks, kept.size());

  constexpr uint64_t kLive = 6;
  uint64_t oldest = 100, next = 100;
  for (; t->Stats().reclaims == 0 && next < 140; ++next) {
    WriteBlocks(*t, next, 1, kBytes);
    if (next - oldest < kLive) continue;
    const BlockKey gone = TestKey(oldest++);
    ASSERT_TRUE(t->Remove(kNs, std::span(&gone, 1)).Wait().ok());
  }
  EXPECT_EQ(t->Stats().reclaims, 1u);
  EXPECT_EQ(t->Stats().reinserted_blocks, kept.size());  // the kept ones' region went first
  EXPECT_EQ(t->Stats().corruptions, 0u);
  EXPECT_EQ(Readable(*t, {0, 1, 2}), kept);
  for (uint64_t i = oldest; i < next; ++i) EXPECT_TRUE(ReadAndCheck(*t, i, kBytes).ok()) << i;
  EXPECT_EQ(t->Stats().corruptions, 0u);
  t->Shutdown();

  t = Open(o);  // the drops were recorded: nothing comes back
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Stats().dropped_on_open, 0u);
  EXPECT_EQ(Readable(*t, {0, 1, 2}), kept);
  t->Shutdown();
}

// Block 2 lies inside block 1 and is last in offset order: block 1 and it
// are dropped, block 0 is kept and rewritten by the reclaim. Kept, the
// three would have the reclaim size its buffer to block 2's end and verify
// block 1 past it.
TEST(NvmeOverlap, EntryInsideAnotherDropsBoth) {
  ExpectOverlapsDropped({.offset = kDisk + kPage, .payload = kPage}, 2, {0});
}

// Block 2 starts inside block 0 and spans into block 1: all three dropped.
TEST(NvmeOverlap, EntrySpanningTwoDropsAllThree) {
  ExpectOverlapsDropped({.offset = kPage, .payload = kBytes}, 3, {});
}

}  // namespace
}  // namespace kvtier::testing
