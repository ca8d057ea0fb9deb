// Offsets, sizes and shape registration of the FlashInfer, packed and MLA
// layouts, against values worked out by hand, and KvLayoutFromShape for
// every kind.
#include <gtest/gtest.h>

#include <vector>

#include "kvtier/kv_layout.h"
#include "tests/gpu/layout_test_util.h"

namespace kvtier {
namespace {

using testing::SmallLayout;

TEST(KvLayoutKindsTest, SizesOfSmallLayouts) {
  const KvLayout fi = SmallLayout(KvLayoutKind::kFlashInfer);
  EXPECT_EQ(fi.Planes(), 2u);
  EXPECT_EQ(fi.PageBytes(), 48u);
  EXPECT_EQ(fi.BlockBytes(), 288u);
  EXPECT_EQ(EngineTensorBytes(fi), 5u * 2 * 48);  // 480
  EXPECT_EQ(EngineTensorCount(fi), 3u);
  const KvLayout packed = SmallLayout(KvLayoutKind::kPacked);
  EXPECT_EQ(packed.BlockBytes(), 288u);
  EXPECT_EQ(EngineTensorBytes(packed), 480u);
  EXPECT_EQ(EngineTensorCount(packed), 3u);
  const KvLayout mla = SmallLayout(KvLayoutKind::kMla);  // T=4, D=12, E=2
  EXPECT_EQ(mla.Planes(), 1u);
  EXPECT_EQ(mla.PageBytes(), 4u * 12 * 2);     // 96
  EXPECT_EQ(mla.BlockBytes(), 3u * 96);        // 288
  EXPECT_EQ(EngineTensorBytes(mla), 5u * 96);  // 480
  EXPECT_EQ(EngineTensorCount(mla), 3u);
}

// Byte strides (blocks=5, tokens=4, heads=2, head_size=3, elem=2):
//   FlashInfer (5, 2, 4, 2, 3): head 6, token 12, kv 48, block 96
//   packed     (5, 2, 4, 6):    kv 6, token 12, head 48, block 96
//   MLA        (5, 4, 12):      token 24, block 96; host (3, 4, 12): token 24, layer 96
// Arguments are (block, layer, kv, token, head).
TEST(KvLayoutKindsTest, FlashInferOffsets) {
  const KvLayout l = SmallLayout(KvLayoutKind::kFlashInfer);
  EXPECT_EQ(EngineOffset(l, 0, 0, 0, 0, 0), 0u);
  EXPECT_EQ(EngineOffset(l, 2, 1, 1, 3, 1), 2 * 96 + 1 * 48 + 3 * 12 + 1 * 6);  // 282
  EXPECT_EQ(EngineOffset(l, 4, 2, 0, 1, 1), 4 * 96 + 0 * 48 + 1 * 12 + 1 * 6);  // 402
  EXPECT_EQ(EngineOffset(l, 1, 0, 1, 2, 0), 1 * 96 + 1 * 48 + 2 * 12);          // 168
  EXPECT_EQ(EngineOffset(l, 4, 2, 1, 3, 1) + 6, EngineTensorBytes(l));
}

TEST(KvLayoutKindsTest, PackedOffsets) {
  const KvLayout l = SmallLayout(KvLayoutKind::kPacked);
  EXPECT_EQ(EngineOffset(l, 0, 0, 0, 0, 0), 0u);
  EXPECT_EQ(EngineOffset(l, 0, 0, 1, 0, 0), 6u);  // V row right after the K row
  EXPECT_EQ(EngineOffset(l, 2, 1, 1, 3, 1), 2 * 96 + 1 * 48 + 3 * 12 + 1 * 6);  // 282
  EXPECT_EQ(EngineOffset(l, 4, 2, 0, 1, 1), 4 * 96 + 1 * 48 + 1 * 12 + 0 * 6);  // 444
  EXPECT_EQ(EngineOffset(l, 1, 0, 1, 2, 0), 1 * 96 + 0 * 48 + 2 * 12 + 1 * 6);  // 126
  EXPECT_EQ(EngineOffset(l, 4, 2, 1, 3, 1) + 6, EngineTensorBytes(l));
}

TEST(KvLayoutKindsTest, MlaOffsets) {
  const KvLayout l = SmallLayout(KvLayoutKind::kMla);
  EXPECT_EQ(EngineOffset(l, 0, 0, 0, 0, 0), 0u);
  EXPECT_EQ(EngineOffset(l, 2, 1, 0, 3, 0), 2 * 96 + 3 * 24);  // 264
  EXPECT_EQ(EngineOffset(l, 4, 2, 0, 1, 0), 4 * 96 + 1 * 24);  // 408
  EXPECT_EQ(EngineOffset(l, 4, 2, 0, 3, 0) + 24, EngineTensorBytes(l));
  EXPECT_EQ(HostOffset(l, 0, 0, 0, 0), 0u);
  EXPECT_EQ(HostOffset(l, 1, 0, 3, 0), 1 * 96 + 3 * 24);  // 168
  EXPECT_EQ(HostOffset(l, 2, 0, 1, 0), 2 * 96 + 1 * 24);  // 216
  EXPECT_EQ(HostOffset(l, 2, 0, 3, 0) + 24, l.BlockBytes());
}

TEST(KvLayoutKindsTest, MlaNeedsOneHead) {
  KvLayout l = SmallLayout(KvLayoutKind::kMla);
  l.num_kv_heads = 2;
  EXPECT_EQ(l.Validate().ToString(),
            "invalid_argument: kv layout: mla stores one latent vector per token; num_kv_heads "
            "is 2 but must be 1 (head_size is kv_lora_rank + rope_dim)");
}

TEST(KvLayoutKindsTest, ValidateRejectsUnknownKind) {
  KvLayout l = SmallLayout(KvLayoutKind::kVllmNhd);
  l.kind = static_cast<KvLayoutKind>(6);
  EXPECT_EQ(l.Validate().ToString(), "invalid_argument: kv layout: unknown layout kind 6");
}

// A DeepSeek-V3-like MLA cache: latent 512 + rope 64 = 576, bf16.
TEST(KvLayoutKindsTest, MlaRealisticGeometry) {
  const std::vector<uint64_t> shape = {1000, 64, 576};
  Result<KvLayout> l = KvLayoutFromShape(KvLayoutKind::kMla, shape, 61, 2);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->BlockBytes(), 61u * 64 * 576 * 2);
  EXPECT_EQ(l->Signature(), "mla:L61:H1:D576:T64:E2");
}

struct ShapeCase {
  KvLayoutKind kind;
  std::vector<uint64_t> shape;
  uint32_t tensors;
};

TEST(KvLayoutFromShapeTest, EveryKindReadsItsDimensions) {
  // Expected: layers 3, blocks 5, tokens 4, heads 2, head_size 3 (mla: 1, 12).
  const ShapeCase cases[] = {
      {KvLayoutKind::kVllmNhd, {2, 5, 4, 2, 3}, 3},
      {KvLayoutKind::kVllmHnd, {2, 5, 2, 4, 3}, 3},
      {KvLayoutKind::kCrossLayer, {5, 3, 2, 4, 2, 3}, 1},
      {KvLayoutKind::kFlashInfer, {5, 2, 4, 2, 3}, 3},
      {KvLayoutKind::kPacked, {5, 2, 4, 6}, 3},
      {KvLayoutKind::kMla, {5, 4, 12}, 3},
  };
  for (const ShapeCase& c : cases) {
    Result<KvLayout> l = KvLayoutFromShape(c.kind, c.shape, c.tensors, 2);
    ASSERT_TRUE(l.ok()) << KvLayoutKindName(c.kind) << ": " << l.status().ToString();
    EXPECT_EQ(l->Signature(), SmallLayout(c.kind).Signature());
    EXPECT_EQ(l->num_blocks, 5u) << KvLayoutKindName(c.kind);
    EXPECT_EQ(EngineTensorBytes(*l), EngineTensorBytes(SmallLayout(c.kind)));
  }
}

TEST(KvLayoutFromShapeTest, MismatchedShapesAreRejectedWithTheExpectedShape) {
  const auto msg = [](KvLayoutKind kind, std::vector<uint64_t> shape, uint32_t tensors) {
    return KvLayoutFromShape(kind, shape, tensors, 2).status().ToString();
  };
  EXPECT_EQ(msg(KvLayoutKind::kVllmNhd, {5, 2, 4, 2, 3}, 3),
            "invalid_argument: kv layout: nhd expects a tensor of shape (2, num_blocks, "
            "block_size, num_kv_heads, head_size); got (5, 2, 4, 2, 3)");
  EXPECT_EQ(msg(KvLayoutKind::kVllmHnd, {2, 5, 2, 4}, 3),
            "invalid_argument: kv layout: hnd expects a tensor of shape (2, num_blocks, "
            "num_kv_heads, block_size, head_size); got (2, 5, 2, 4)");
  EXPECT_EQ(msg(KvLayoutKind::kFlashInfer, {2, 5, 4, 2, 3}, 3),
            "invalid_argument: kv layout: flashinfer expects a tensor of shape (num_blocks, 2, "
            "block_size, num_kv_heads, head_size); got (2, 5, 4, 2, 3)");
  EXPECT_EQ(msg(KvLayoutKind::kPacked, {5, 2, 4, 7}, 3),
            "invalid_argument: kv layout: packed expects a tensor of shape (num_blocks, "
            "num_kv_heads, block_size, 2 * head_size); got (5, 2, 4, 7)");
  EXPECT_EQ(msg(KvLayoutKind::kMla, {5, 1, 4, 12}, 3),
            "invalid_argument: kv layout: mla expects a tensor of shape (num_blocks, "
            "block_size, kv_lora_rank + rope_dim); got (5, 1, 4, 12)");
  EXPECT_EQ(msg(KvLayoutKind::kCrossLayer, {5, 3, 2, 4, 0, 3}, 1),
            "invalid_argument: kv layout: cross_layer expects a tensor of shape (num_blocks, "
            "num_layers, 2, block_size, num_kv_heads, head_size); got (5, 3, 2, 4, 0, 3)");
  EXPECT_EQ(msg(KvLayoutKind::kMla, {5, 4, 1ull << 32}, 3),
            "invalid_argument: kv layout: mla expects a tensor of shape (num_blocks, "
            "block_size, kv_lora_rank + rope_dim); got (5, 4, 4294967296)");
  EXPECT_EQ(msg(KvLayoutKind::kCrossLayer, {5, 3, 2, 4, 2, 3}, 3),
            "invalid_argument: kv layout: cross_layer is one tensor holding every layer; got 3 "
            "tensors");
  EXPECT_EQ(msg(KvLayoutKind::kVllmNhd, {2, 5, 4, 2, 3}, 0),
            "invalid_argument: kv layout: nhd has one tensor per layer (at least one); got 0 "
            "tensors");
  EXPECT_EQ(KvLayoutFromShape(KvLayoutKind::kVllmNhd, std::vector<uint64_t>{2, 5, 4, 2, 3}, 3, 3)
                .status()
                .ToString(),
            "invalid_argument: kv layout: elem_bytes is 3; must be 1, 2 or 4");
}

}  // namespace
}  // namespace kvtier
