#include "kvtier/block_header.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>


namespace kvtier {
namespace {

using Bytes = std::array<std::byte, kBlockHeaderBytes>;

struct Fixture {
  NamespaceId ns{77};
  BlockKey key{1, 2};
  std::vector<std::byte> payload = std::vector<std::byte>(1000, std::byte{9});
  Bytes Encoded() const {
    Bytes b{};
    EncodeBlockHeader(MakeBlockHeader(ns, key, payload), b);
    return b;
  }
};

TEST(BlockHeader, RoundTrip) {
  Fixture f;
  Bytes b = f.Encoded();
  auto h = DecodeBlockHeader(b);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->ns, f.ns);
  EXPECT_EQ(h->key, f.key);
  EXPECT_EQ(h->payload_bytes, 1000u);
  EXPECT_TRUE(VerifyBlock(*h, f.ns, f.key, f.payload).ok());
  // The layout is fixed: magic "KVTB" first, little-endian.
  EXPECT_EQ(static_cast<char>(b[0]), 'K');
  EXPECT_EQ(static_cast<char>(b[3]), 'B');
}

// Checksums are part of the stored format: they must equal XXH3-64 whichever
// implementation the CPU picks (AVX2 or baseline). These values come from
// the reference libxxhash, over every XXH3 length class.
TEST(BlockHeader, PayloadChecksumIsXxh3OverEveryLengthClass) {
  struct Case {
    size_t bytes;
    uint64_t xxh3;
  };
  const Case cases[] = {
      {0, 0x2d06800538d394c2ULL},     {1, 0x4c5cca45d0f4811fULL},
      {3, 0x15f7093b173d005cULL},     {16, 0x7e484c18d74895d0ULL},
      {17, 0x208bde5ee2bed407ULL},    {128, 0xf92b70eaa21a6288ULL},
      {129, 0xf8f76713f2bb60faULL},   {240, 0xccc7375172c41f03ULL},
      {241, 0x0b3b630948ce4a00ULL},   {1000, 0x989765d0ea7a5ecdULL},
      {65541, 0x12f4b6b91a8432aeULL}, {1048576, 0x269eb834f6c110a9ULL},
  };
  for (const Case& c : cases) {
    std::vector<std::byte> payload(c.bytes);
    for (size_t i = 0; i < c.bytes; ++i) payload[i] = static_cast<std::byte>(i * 31 + 7);
    EXPECT_EQ(PayloadChecksum(ChecksumKind::kXxh3_64, payload), c.xxh3) << c.bytes << " bytes";
  }
}

TEST(BlockHeader, EveryMalformedFieldIsRejectedWithItsReason) {
  Fixture f;
  struct Case {
    size_t offset;
    uint8_t value;
    const char* reason;
  };
  // Any single changed byte must be caught; the reason names the first check
  // that fails (the header checksum for fields it covers).
  const Case cases[] = {
      {0, 0x00, "bad magic"},
      {4, 0x02, "unsupported format version 2"},
      {6, 0x07, "unknown checksum kind 7"},
      {7, 0x01, "reserved bytes are not zero"},
      {57, 0x01, "reserved bytes are not zero"},
      {9, 0xFF, "header checksum mismatch"},
      {20, 0xFF, "header checksum mismatch"},
      {33, 0xFF, "header checksum mismatch"},
      {44, 0xFF, "header checksum mismatch"},
      {50, 0xFF, "header checksum mismatch"},
  };
  for (const Case& c : cases) {
    Bytes b = f.Encoded();
    b[c.offset] = std::byte{c.value};
    auto h = DecodeBlockHeader(b);
    ASSERT_FALSE(h.ok()) << "offset " << c.offset;
    EXPECT_EQ(h.status().code(), StatusCode::kCorruption);
    EXPECT_NE(h.status().message().find(c.reason), std::string_view::npos)
        << "offset " << c.offset << ": " << h.status().ToString();
  }
  Bytes enc = f.Encoded();
  auto short_buf = DecodeBlockHeader(std::span(enc).first(63));
  EXPECT_EQ(short_buf.status().ToString(),
            "invalid_argument: block header: need 64 bytes, got 63");
}

TEST(BlockHeader, VerifyCatchesWrongOwnerLengthAndBytes) {
  Fixture f;
  BlockHeader h = MakeBlockHeader(f.ns, f.key, f.payload);
  EXPECT_NE(VerifyBlock(h, NamespaceId{78}, f.key, f.payload).message().find("namespace"),
            std::string_view::npos);
  EXPECT_NE(VerifyBlock(h, f.ns, BlockKey{1, 3}, f.payload).message().find("key"),
            std::string_view::npos);
  auto shorter = std::span(f.payload).first(999);
  EXPECT_NE(VerifyBlock(h, f.ns, f.key, shorter).message().find("length 999"),
            std::string_view::npos);
  auto flipped = f.payload;
  flipped[500] = std::byte{8};
  Status st = VerifyBlock(h, f.ns, f.key, flipped);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("checksum mismatch"), std::string_view::npos);
}

TEST(BlockHeader, AbsurdLengthIsCorruptionEvenWithAValidChecksum) {
  Fixture f;
  BlockHeader h = MakeBlockHeader(f.ns, f.key, f.payload);
  h.payload_bytes = kMaxBlockPayloadBytes + 1;
  Bytes b{};
  EncodeBlockHeader(h, b);
  auto d = DecodeBlockHeader(b);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("exceeds"), std::string_view::npos);
}

}  // namespace
}  // namespace kvtier
