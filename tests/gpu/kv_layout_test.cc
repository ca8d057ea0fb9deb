#include "kvtier/kv_layout.h"

#include <gtest/gtest.h>

#include "tests/gpu/layout_test_util.h"

namespace kvtier {
namespace {

using testing::SmallLayout;

TEST(KvLayoutKindTest, NamesRoundTrip) {
  EXPECT_EQ(KvLayoutKindName(KvLayoutKind::kVllmNhd), "nhd");
  EXPECT_EQ(KvLayoutKindName(KvLayoutKind::kVllmHnd), "hnd");
  EXPECT_EQ(KvLayoutKindName(KvLayoutKind::kCrossLayer), "cross_layer");
  EXPECT_EQ(KvLayoutKindName(KvLayoutKind::kFlashInfer), "flashinfer");
  EXPECT_EQ(KvLayoutKindName(KvLayoutKind::kPacked), "packed");
  EXPECT_EQ(KvLayoutKindName(KvLayoutKind::kMla), "mla");
  for (KvLayoutKind kind : kAllKvLayoutKinds) {
    Result<KvLayoutKind> parsed = ParseKvLayoutKind(KvLayoutKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, kind);
  }
}

TEST(KvLayoutKindTest, UnknownNameListsValidNames) {
  for (std::string_view bad : {"NHD", "", "cross-layer", "nhd "}) {
    Result<KvLayoutKind> parsed = ParseKvLayoutKind(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().ToString(),
              "invalid_argument: unknown kv layout '" + std::string(bad) +
                  "'; valid layouts: nhd, hnd, cross_layer, flashinfer, packed, mla");
  }
}

TEST(KvLayoutTest, SignatureNamesKindAndEveryDimension) {
  KvLayout l;
  l.num_layers = 7;
  l.num_kv_heads = 5;
  l.head_size = 96;
  l.block_tokens = 32;
  l.elem_bytes = 4;
  l.kind = KvLayoutKind::kVllmNhd;
  EXPECT_EQ(l.Signature(), "nhd:L7:H5:D96:T32:E4");
  l.kind = KvLayoutKind::kVllmHnd;
  EXPECT_EQ(l.Signature(), "hnd:L7:H5:D96:T32:E4");
  l.kind = KvLayoutKind::kCrossLayer;
  EXPECT_EQ(l.Signature(), "cross_layer:L7:H5:D96:T32:E4");
}

TEST(KvLayoutTest, SignatureChangesWithEachModelDimension) {
  const KvLayout base = SmallLayout(KvLayoutKind::kVllmNhd);
  KvLayout hnd = base;
  hnd.kind = KvLayoutKind::kVllmHnd;
  EXPECT_NE(base.Signature(), hnd.Signature());
  uint32_t KvLayout::*fields[] = {&KvLayout::num_layers, &KvLayout::block_tokens,
                                  &KvLayout::num_kv_heads, &KvLayout::head_size,
                                  &KvLayout::elem_bytes};
  for (auto field : fields) {
    KvLayout other = base;
    other.*field += 1;
    EXPECT_NE(base.Signature(), other.Signature()) << other.Signature();
  }
  // The pool size is a deployment choice, not part of the model fingerprint.
  KvLayout bigger_pool = base;
  bigger_pool.num_blocks = 1000;
  EXPECT_EQ(base.Signature(), bigger_pool.Signature());
}

TEST(KvLayoutTest, ValidateAcceptsSmallLayouts) {
  for (KvLayoutKind kind : kAllKvLayoutKinds) {
    EXPECT_TRUE(SmallLayout(kind).Validate().ok());
  }
  KvLayout fp8 = SmallLayout(KvLayoutKind::kVllmNhd);
  fp8.elem_bytes = 1;
  EXPECT_TRUE(fp8.Validate().ok());
  fp8.elem_bytes = 4;
  EXPECT_TRUE(fp8.Validate().ok());
}

TEST(KvLayoutTest, ValidateRejectsZeroDimensions) {
  struct Case {
    uint32_t KvLayout::*field;
    const char* message;
  };
  const Case cases[] = {
      {&KvLayout::num_layers, "invalid_argument: kv layout: num_layers is 0"},
      {&KvLayout::num_blocks, "invalid_argument: kv layout: num_blocks is 0"},
      {&KvLayout::block_tokens, "invalid_argument: kv layout: block_tokens is 0"},
      {&KvLayout::num_kv_heads, "invalid_argument: kv layout: num_kv_heads is 0"},
      {&KvLayout::head_size, "invalid_argument: kv layout: head_size is 0"},
  };
  for (const Case& c : cases) {
    KvLayout l = SmallLayout(KvLayoutKind::kVllmHnd);
    l.*(c.field) = 0;
    EXPECT_EQ(l.Validate().ToString(), c.message);
  }
}

TEST(KvLayoutTest, ValidateRejectsUnknownElementSizes) {
  for (uint32_t e : {0u, 3u, 8u}) {
    KvLayout l = SmallLayout(KvLayoutKind::kVllmNhd);
    l.elem_bytes = e;
    EXPECT_EQ(l.Validate().ToString(), "invalid_argument: kv layout: elem_bytes is " +
                                           std::to_string(e) + "; must be 1, 2 or 4");
  }
}

TEST(KvLayoutTest, ValidateRejectsCachesPast2To48Bytes) {
  // 2 * 1 layer * 2^24 blocks * 16 tokens * 1 head * 2^18 * 2 bytes = 2^48.
  KvLayout l;
  l.num_layers = 1;
  l.num_blocks = 1u << 24;
  l.block_tokens = 16;
  l.num_kv_heads = 1;
  l.head_size = 1u << 18;
  l.elem_bytes = 2;
  EXPECT_TRUE(l.Validate().ok());
  l.num_blocks += 1;
  const std::string too_big =
      "invalid_argument: kv layout: engine cache size (num_blocks * BlockBytes()) exceeds 2^48 "
      "bytes";
  EXPECT_EQ(l.Validate().ToString(), too_big);
  // Every factor near 2^32: the product would wrap uint64 if not checked.
  KvLayout huge;
  huge.num_layers = huge.num_blocks = huge.block_tokens = huge.num_kv_heads = huge.head_size =
      0xffffffffu;
  huge.elem_bytes = 4;
  EXPECT_EQ(huge.Validate().ToString(), too_big);
  huge.kind = KvLayoutKind::kCrossLayer;
  EXPECT_EQ(huge.Validate().ToString(), too_big);
}

TEST(KvLayoutTest, SizesOfSmallLayout) {
  const KvLayout nhd = SmallLayout(KvLayoutKind::kVllmNhd);
  EXPECT_EQ(nhd.PageBytes(), 4u * 2 * 3 * 2);      // 48
  EXPECT_EQ(nhd.BlockBytes(), 3u * 2 * 48);        // 288
  EXPECT_EQ(EngineTensorBytes(nhd), 2u * 5 * 48);  // 480
  EXPECT_EQ(EngineTensorCount(nhd), 3u);
  const KvLayout hnd = SmallLayout(KvLayoutKind::kVllmHnd);
  EXPECT_EQ(EngineTensorBytes(hnd), 480u);
  EXPECT_EQ(EngineTensorCount(hnd), 3u);
  const KvLayout cross = SmallLayout(KvLayoutKind::kCrossLayer);
  EXPECT_EQ(EngineTensorBytes(cross), 5u * 288);  // 1440
  EXPECT_EQ(EngineTensorCount(cross), 1u);
}

// Byte strides of the small layout (blocks=5, layers=3, tokens=4, heads=2,
// head_size=3, elem=2), worked out by hand:
//   NHD  (2, 5, 4, 2, 3): head 6, token 12, block 48, kv 240
//   HND  (2, 5, 2, 4, 3): token 6, head 24, block 48, kv 240
//   cross (5, 3, 2, 4, 2, 3): head 6, token 12, kv 48, layer 96, block 288
//   host (3, 2, 4, 2, 3): head 6, token 12, kv 48, layer 96
// Arguments below are (block, layer, kv, token, head).
TEST(KvLayoutOffsetTest, Nhd) {
  const KvLayout l = SmallLayout(KvLayoutKind::kVllmNhd);
  EXPECT_EQ(EngineOffset(l, 0, 0, 0, 0, 0), 0u);
  EXPECT_EQ(EngineOffset(l, 2, 1, 1, 3, 1), 1 * 240 + 2 * 48 + 3 * 12 + 1 * 6);  // 378
  EXPECT_EQ(EngineOffset(l, 4, 2, 0, 1, 1), 0 * 240 + 4 * 48 + 1 * 12 + 1 * 6);  // 210
  EXPECT_EQ(EngineOffset(l, 1, 0, 1, 2, 0), 1 * 240 + 1 * 48 + 2 * 12 + 0 * 6);  // 312
  // The last row of the last layer ends exactly at the tensor's end.
  EXPECT_EQ(EngineOffset(l, 4, 2, 1, 3, 1), 474u);
  EXPECT_EQ(EngineOffset(l, 4, 2, 1, 3, 1) + 6, EngineTensorBytes(l));
}

TEST(KvLayoutOffsetTest, Hnd) {
  const KvLayout l = SmallLayout(KvLayoutKind::kVllmHnd);
  EXPECT_EQ(EngineOffset(l, 0, 0, 0, 0, 0), 0u);
  EXPECT_EQ(EngineOffset(l, 2, 1, 1, 3, 1), 1 * 240 + 2 * 48 + 1 * 24 + 3 * 6);  // 378
  EXPECT_EQ(EngineOffset(l, 4, 2, 0, 1, 1), 0 * 240 + 4 * 48 + 1 * 24 + 1 * 6);  // 222
  EXPECT_EQ(EngineOffset(l, 1, 0, 1, 2, 0), 1 * 240 + 1 * 48 + 0 * 24 + 2 * 6);  // 300
  EXPECT_EQ(EngineOffset(l, 3, 0, 0, 0, 1), 0 * 240 + 3 * 48 + 1 * 24 + 0 * 6);  // 168
  EXPECT_EQ(EngineOffset(l, 4, 2, 1, 3, 1), 474u);
}

TEST(KvLayoutOffsetTest, CrossLayer) {
  const KvLayout l = SmallLayout(KvLayoutKind::kCrossLayer);
  EXPECT_EQ(EngineOffset(l, 0, 0, 0, 0, 0), 0u);
  EXPECT_EQ(EngineOffset(l, 2, 1, 1, 3, 1), 2 * 288 + 1 * 96 + 1 * 48 + 3 * 12 + 1 * 6);  // 762
  EXPECT_EQ(EngineOffset(l, 4, 2, 0, 1, 1), 4 * 288 + 2 * 96 + 0 * 48 + 1 * 12 + 1 * 6);  // 1362
  EXPECT_EQ(EngineOffset(l, 1, 0, 1, 2, 0), 1 * 288 + 0 * 96 + 1 * 48 + 2 * 12 + 0 * 6);  // 360
  EXPECT_EQ(EngineOffset(l, 4, 2, 1, 3, 1), 1434u);
  EXPECT_EQ(EngineOffset(l, 4, 2, 1, 3, 1) + 6, EngineTensorBytes(l));
}

TEST(KvLayoutOffsetTest, HostIsTheSameForEveryEngineLayout) {
  for (auto kind : {KvLayoutKind::kVllmNhd, KvLayoutKind::kVllmHnd, KvLayoutKind::kCrossLayer,
                    KvLayoutKind::kFlashInfer, KvLayoutKind::kPacked}) {
    const KvLayout l = SmallLayout(kind);
    EXPECT_EQ(HostOffset(l, 0, 0, 0, 0), 0u);
    EXPECT_EQ(HostOffset(l, 1, 1, 3, 1), 1 * 96 + 1 * 48 + 3 * 12 + 1 * 6);  // 186
    EXPECT_EQ(HostOffset(l, 2, 0, 1, 1), 2 * 96 + 0 * 48 + 1 * 12 + 1 * 6);  // 210
    EXPECT_EQ(HostOffset(l, 0, 1, 2, 0), 0 * 96 + 1 * 48 + 2 * 12 + 0 * 6);  // 72
    EXPECT_EQ(HostOffset(l, 2, 1, 3, 1) + 6, l.BlockBytes());
  }
}

// The offsets of an 80-layer fp16 model with a 2^20-block pool do not wrap.
TEST(KvLayoutOffsetTest, LargeLayoutDoesNotWrap) {
  KvLayout l;
  l.kind = KvLayoutKind::kCrossLayer;
  l.num_layers = 80;
  l.num_blocks = 1u << 20;
  l.block_tokens = 16;
  l.num_kv_heads = 8;
  l.head_size = 128;
  l.elem_bytes = 2;
  ASSERT_TRUE(l.Validate().ok());
  // Last row of the last block: (((2^20 - 1) * 80 + 79) * 2 + 1) * 16 + 15) * 8 + 7 rows of 256.
  const uint64_t rows = ((((uint64_t{1} << 20) - 1) * 80 + 79) * 2 + 1) * 16 * 8 + 15 * 8 + 7;
  EXPECT_EQ(EngineOffset(l, (1u << 20) - 1, 79, 1, 15, 7), rows * 256);
  EXPECT_EQ(EngineOffset(l, (1u << 20) - 1, 79, 1, 15, 7) + 256, EngineTensorBytes(l));
}

}  // namespace
}  // namespace kvtier
