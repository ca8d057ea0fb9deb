#include "gpu/layout_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/gpu/layout_test_util.h"

namespace kvtier::internal {
namespace {

using kvtier::testing::RefEngine;
using kvtier::testing::RefHost;
using kvtier::testing::SmallLayout;

std::vector<CopyRun> LayerRuns(const KvLayout& l, uint32_t block, uint32_t layer) {
  std::vector<CopyRun> runs;
  AppendLayerRuns(l, block, layer, &runs);
  return runs;
}

std::vector<CopyRun> BlockRuns(const KvLayout& l, uint32_t block) {
  std::vector<CopyRun> runs;
  AppendBlockRuns(l, block, &runs);
  return runs;
}

// Small layout strides: see kv_layout_test.cc. Page = 48 bytes, block = 288.
TEST(LayoutRunsTest, NhdLayerIsOneRunPerPage) {
  const KvLayout l = SmallLayout(KvLayoutKind::kVllmNhd);
  const std::vector<CopyRun> expected = {{1, 2 * 48, 96, 48}, {1, 240 + 2 * 48, 144, 48}};
  EXPECT_EQ(LayerRuns(l, 2, 1), expected);
  EXPECT_EQ(BlockRuns(l, 2).size(), 6u);
}

TEST(LayoutRunsTest, HndLayerIsOneRunPerTokenAndHead) {
  const KvLayout l = SmallLayout(KvLayoutKind::kVllmHnd);
  const std::vector<CopyRun> runs = LayerRuns(l, 2, 1);
  ASSERT_EQ(runs.size(), 2u * 4 * 2);
  // Host order: (kv 0, token 0, head 0), (kv 0, token 0, head 1), ...
  EXPECT_EQ(runs[0], (CopyRun{1, 2 * 48 + 0 * 24 + 0 * 6, 96, 6}));
  EXPECT_EQ(runs[1], (CopyRun{1, 2 * 48 + 1 * 24 + 0 * 6, 102, 6}));
  EXPECT_EQ(runs[2], (CopyRun{1, 2 * 48 + 0 * 24 + 1 * 6, 108, 6}));
  EXPECT_EQ(runs[15], (CopyRun{1, 240 + 2 * 48 + 1 * 24 + 3 * 6, 186, 6}));
  EXPECT_EQ(BlockRuns(l, 2).size(), 3u * 16);
}

TEST(LayoutRunsTest, CrossLayerLayerIsOneRunAndBlockIsOneRun) {
  const KvLayout l = SmallLayout(KvLayoutKind::kCrossLayer);
  const std::vector<CopyRun> layer = {{0, 2 * 288 + 1 * 96, 96, 96}};
  EXPECT_EQ(LayerRuns(l, 2, 1), layer);
  const std::vector<CopyRun> block = {{0, 4 * 288, 0, 288}};
  EXPECT_EQ(BlockRuns(l, 4), block);
}

TEST(LayoutRunsTest, FlashInferLayerIsOneRunOfBothPages) {
  // Per layer (5, 2, 4, 2, 3): a block's K and V pages are adjacent.
  const KvLayout l = SmallLayout(KvLayoutKind::kFlashInfer);
  const std::vector<CopyRun> layer = {{1, 2 * 96, 96, 96}};
  EXPECT_EQ(LayerRuns(l, 2, 1), layer);
  EXPECT_EQ(BlockRuns(l, 2).size(), 3u);  // one per layer tensor
}

TEST(LayoutRunsTest, PackedLayerIsOneRunPerRow) {
  // Per layer (5, 2, 4, 6): K row at +0, V row at +6 of each (head, token).
  // Strides: token 12, head 48, block 96.
  const KvLayout l = SmallLayout(KvLayoutKind::kPacked);
  const std::vector<CopyRun> runs = LayerRuns(l, 2, 1);
  ASSERT_EQ(runs.size(), 2u * 4 * 2);
  EXPECT_EQ(runs[0], (CopyRun{1, 2 * 96 + 0 * 48 + 0 * 12 + 0, 96, 6}));   // K t0 h0
  EXPECT_EQ(runs[1], (CopyRun{1, 2 * 96 + 1 * 48 + 0 * 12 + 0, 102, 6}));  // K t0 h1
  EXPECT_EQ(runs[2], (CopyRun{1, 2 * 96 + 0 * 48 + 1 * 12 + 0, 108, 6}));  // K t1 h0
  EXPECT_EQ(runs[8], (CopyRun{1, 2 * 96 + 0 * 48 + 0 * 12 + 6, 144, 6}));  // V t0 h0
  EXPECT_EQ(runs[15], (CopyRun{1, 2 * 96 + 1 * 48 + 3 * 12 + 6, 186, 6}));
}

TEST(LayoutRunsTest, MlaLayerIsOneLatentPage) {
  // Per layer (5, 4, 12): page = 4 * 12 * 2 = 96 bytes; host (3, 4, 12).
  const KvLayout l = SmallLayout(KvLayoutKind::kMla);
  const std::vector<CopyRun> layer = {{1, 2 * 96, 96, 96}};
  EXPECT_EQ(LayerRuns(l, 2, 1), layer);
  const std::vector<CopyRun> block = {
      {0, 4 * 96, 0, 96}, {1, 4 * 96, 96, 96}, {2, 4 * 96, 192, 96}};
  EXPECT_EQ(BlockRuns(l, 4), block);
}

TEST(LayoutRunsTest, DegenerateShapesMerge) {
  KvLayout hnd = SmallLayout(KvLayoutKind::kVllmHnd);
  hnd.num_kv_heads = 1;  // HND == NHD: each page is contiguous.
  const std::vector<CopyRun> one_head = {{1, 2 * 24, 48, 24}, {1, 5 * 24 + 2 * 24, 72, 24}};
  EXPECT_EQ(LayerRuns(hnd, 2, 1), one_head);
  KvLayout nhd = SmallLayout(KvLayoutKind::kVllmNhd);
  nhd.num_blocks = 1;  // K and V pages of the only block are adjacent.
  const std::vector<CopyRun> one_block = {{2, 0, 192, 96}};
  EXPECT_EQ(LayerRuns(nhd, 0, 2), one_block);
  EXPECT_EQ(BlockRuns(nhd, 0).size(), 3u);  // Different tensors never merge.
}

TEST(LayoutRunsTest, AppendNeverMergesWithEarlierRuns) {
  KvLayout l = SmallLayout(KvLayoutKind::kCrossLayer);
  std::vector<CopyRun> runs;
  AppendLayerRuns(l, 0, 0, &runs);
  AppendLayerRuns(l, 0, 1, &runs);  // Contiguous with layer 0, but a separate call.
  const std::vector<CopyRun> expected = {{0, 0, 0, 96}, {0, 96, 96, 96}};
  EXPECT_EQ(runs, expected);
}

// Every byte of every layer is covered exactly once and lands where the
// reference strides say.
TEST(LayoutRunsTest, RunsCoverEveryRowOnceAtReferencePositions) {
  for (KvLayoutKind kind : kAllKvLayoutKinds) {
    const KvLayout l = SmallLayout(kind);
    for (uint32_t block = 0; block < l.num_blocks; ++block) {
      std::vector<int> covered(l.BlockBytes(), 0);
      std::vector<CopyRun> runs = BlockRuns(l, block);
      for (const CopyRun& run : runs) {
        for (uint64_t i = 0; i < run.bytes; ++i) ++covered[run.host_offset + i];
      }
      EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }))
          << KvLayoutKindName(kind) << " block " << block;
      kvtier::testing::ForEachRow(l, [&](uint32_t layer, uint32_t kv, uint32_t t, uint32_t h) {
        const uint64_t host = RefHost(l, layer, kv, t, h);
        auto it = std::find_if(runs.begin(), runs.end(), [&](const CopyRun& r) {
          return r.host_offset <= host && host < r.host_offset + r.bytes;
        });
        ASSERT_NE(it, runs.end());
        const kvtier::testing::EnginePos pos = RefEngine(l, block, layer, kv, t, h);
        EXPECT_EQ(it->tensor, pos.tensor);
        EXPECT_EQ(it->engine_offset + (host - it->host_offset), pos.offset);
      });
    }
  }
}

// Small layout: 3 layers, 4 tokens, 2 heads; Planes() is 2 (1 for MLA).
TEST(LayoutRunsTest, MaxRunsPerLayerAndBlock) {
  struct Case {
    KvLayoutKind kind;
    uint64_t layer;
  };
  const Case cases[] = {{KvLayoutKind::kVllmNhd, 2},        {KvLayoutKind::kVllmHnd, 2 * 4 * 2},
                        {KvLayoutKind::kFlashInfer, 2},     {KvLayoutKind::kCrossLayer, 2},
                        {KvLayoutKind::kPacked, 2 * 4 * 2}, {KvLayoutKind::kMla, 1}};
  for (const Case& c : cases) {
    const KvLayout l = SmallLayout(c.kind);
    EXPECT_EQ(MaxLayerRuns(l), c.layer) << KvLayoutKindName(c.kind);
    EXPECT_EQ(MaxBlockRuns(l), 3 * c.layer) << KvLayoutKindName(c.kind);
  }
  KvLayout big = SmallLayout(KvLayoutKind::kVllmHnd);
  big.num_layers = 1024;
  big.block_tokens = 1u << 16;
  big.num_kv_heads = 1u << 16;  // tokens x heads alone is 2^32: no 32-bit product survives
  EXPECT_EQ(MaxLayerRuns(big), uint64_t{1} << 33);
  EXPECT_EQ(MaxBlockRuns(big), uint64_t{1} << 43);
}

// The copy engines reserve these bounds so that appending never reallocates:
// no call appends more, for any kind, block or layer, degenerate shapes too.
TEST(LayoutRunsTest, NoAppendExceedsTheMaxRuns) {
  for (KvLayoutKind kind : kAllKvLayoutKinds) {
    for (uint32_t heads : {1u, 2u}) {
      KvLayout l = SmallLayout(kind);
      l.num_kv_heads = heads;
      if (!l.Validate().ok()) continue;
      bool reached = false;  // the bound is tight for some layer
      for (uint32_t block = 0; block < l.num_blocks; ++block) {
        EXPECT_LE(BlockRuns(l, block).size(), MaxBlockRuns(l)) << KvLayoutKindName(kind);
        for (uint32_t layer = 0; layer < l.num_layers; ++layer) {
          const uint64_t n = LayerRuns(l, block, layer).size();
          EXPECT_LE(n, MaxLayerRuns(l)) << KvLayoutKindName(kind) << " heads " << heads;
          reached |= n == MaxLayerRuns(l);
        }
      }
      // The bound is exact unless a block's pages are adjacent (FlashInfer,
      // cross-layer) or HND rows are (one head).
      const bool merges = kind == KvLayoutKind::kFlashInfer || kind == KvLayoutKind::kCrossLayer ||
                          (kind == KvLayoutKind::kVllmHnd && heads == 1);
      EXPECT_EQ(reached, !merges) << KvLayoutKindName(kind) << " heads " << heads;
    }
  }
}

// "ok | invalid_argument: ..." in copy order.
std::string Joined(const std::vector<Status>& results) {
  std::string out;
  for (const Status& st : results) out += (out.empty() ? "" : " | ") + st.ToString();
  return out;
}

TEST(CheckEachBlockCopyTest, ExactMessages) {
  const KvLayout l = SmallLayout(KvLayoutKind::kVllmNhd);
  std::vector<std::byte> a(288), b(288), small(287), big(288 * 3);
  auto check = [&](std::vector<BlockCopy> copies, bool unique, bool disjoint) {
    return Joined(CheckEachBlockCopy(l, copies, unique, disjoint));
  };
  EXPECT_EQ(check({{0, a}, {4, b}}, true, true), "ok | ok");
  EXPECT_EQ(check({{0, a}, {5, b}, {1, small}}, false, false),
            "ok | invalid_argument: copy 1: engine block 5 out of range [0, 5) | "
            "invalid_argument: copy 2 (engine block 1): host buffer is 287 bytes; a block is 288 "
            "bytes");
  // Only the repeats fail; the first copy to each block stays OK.
  EXPECT_EQ(check({{3, a}, {1, b}, {3, a}}, true, false),
            "ok | ok | invalid_argument: copy 2 (engine block 3): engine block 3 is already the "
            "target of copy 0");
  EXPECT_EQ(
      check({{1, a}, {3, a}, {3, a}, {1, a}, {3, b}}, true, false),
      "ok | ok | invalid_argument: copy 2 (engine block 3): engine block 3 is already the target "
      "of copy 1 | "
      "invalid_argument: copy 3 (engine block 1): engine block 1 is already the target of copy 0 | "
      "invalid_argument: copy 4 (engine block 3): engine block 3 is already the target of copy 1");
  // A copy that failed its own check does not claim its block.
  EXPECT_EQ(check({{2, small}, {2, a}}, true, false),
            "invalid_argument: copy 0 (engine block 2): host buffer is 287 bytes; a block is 288 "
            "bytes | ok");
  // Repeats are allowed when reading.
  EXPECT_EQ(check({{3, a}, {3, b}}, false, true), "ok | ok");
  // Overlapping host buffers: the later copy of each overlapping pair fails;
  // touching buffers do not overlap.
  std::span<std::byte> whole(big);
  EXPECT_EQ(
      check(
          {{0, whole.subspan(288, 288)}, {1, whole.subspan(0, 288)}, {2, whole.subspan(576, 288)}},
          false, true),
      "ok | ok | ok");
  EXPECT_EQ(check({{0, whole.subspan(100, 288)},
                   {1, whole.subspan(0, 288)},
                   {2, whole.subspan(300, 288)},
                   {3, whole.subspan(100, 288)}},
                  false, true),
            "ok | invalid_argument: copy 1 (engine block 1): host buffer overlaps the one of copy "
            "0 | invalid_argument: copy 2 (engine block 2): host buffer overlaps the one of copy 0 "
            "| invalid_argument: copy 3 (engine block 3): host buffer overlaps the one of copy 0");
  // The same buffers are fine for a scatter, which only reads them.
  EXPECT_EQ(check({{0, whole.subspan(100, 288)}, {1, whole.subspan(0, 288)}}, true, false),
            "ok | ok");
  EXPECT_EQ(CheckBlockCopy(l, 7, 288).ToString(),
            "invalid_argument: engine block 7 out of range [0, 5)");
}

}  // namespace
}  // namespace kvtier::internal
