// What `kvtier-inspect redis summary` makes of a live store's SCAN: keys
// that vanish before their value is read and keys SCAN returns twice are no
// damage, and a sample that misses a namespace still estimates its bytes.
#include "tools/inspect/redis_tally.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvtier/block_header.h"

namespace kvtier::inspect {
namespace {

std::string Name(uint64_t ns, const BlockKey& key) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(ns));
  return std::string("kv:") + hex + ":" + ToHex(key);
}

// The first 64 bytes of a value holding `payload_bytes` for (ns, key).
std::string Head(uint64_t ns, const BlockKey& key, uint64_t payload_bytes) {
  std::vector<std::byte> payload(payload_bytes, std::byte{3});
  std::string head(kBlockHeaderBytes, '\0');
  EncodeBlockHeader(MakeBlockHeader(NamespaceId{ns}, key, payload),
                    std::as_writable_bytes(std::span(head.data(), head.size())));
  return head;
}

// Measures `name` as a value of (ns, key) with `payload_bytes`.
void Measure(RedisTally& t, uint64_t ns, const BlockKey& key, uint64_t payload_bytes) {
  t.AddMeasured(Name(ns, key), kBlockHeaderBytes + payload_bytes, Head(ns, key, payload_bytes));
}

TEST(RedisTally, KeysGoneBeforeTheirValueIsReadAreNotBadHeaders) {
  RedisTally t("kv", 0);
  const BlockKey a{1, 1}, b{1, 2};
  ASSERT_TRUE(t.AddKey(Name(0xa, a)));
  ASSERT_TRUE(t.AddKey(Name(0xa, b)));
  Measure(t, 0xa, a, 100);
  t.AddMeasured(Name(0xa, b), 0, "");  // STRLEN and GETRANGE of a missing key
  EXPECT_EQ(t.bad_headers(), 0u);
  EXPECT_EQ(t.vanished(), 1u);
  EXPECT_EQ(t.blocks(), 1u);
  EXPECT_EQ(t.sampled(), 1u);
  const RedisEstimate e = t.Estimate();
  EXPECT_FALSE(e.estimated);
  EXPECT_EQ(e.payload_bytes, 100u);
  ASSERT_EQ(e.namespaces.size(), 1u);
  EXPECT_EQ(e.namespaces[0].blocks, 1u);

  // A namespace whose every key vanished has no line.
  ASSERT_TRUE(t.AddKey(Name(0xc, a)));
  t.AddMeasured(Name(0xc, a), 0, "");
  EXPECT_EQ(t.Estimate().namespaces.size(), 1u);
  EXPECT_EQ(t.vanished(), 2u);

  // A value that is there but is not this key's block is bad.
  ASSERT_TRUE(t.AddKey(Name(0xa, BlockKey{1, 3})));
  t.AddMeasured(Name(0xa, BlockKey{1, 3}), 70, Head(0xa, BlockKey{9, 9}, 6));
  EXPECT_EQ(t.bad_headers(), 1u);
  // So is this key's block of another namespace, and a value whose length is
  // not its header's (both fail the tier's reads); their payloads count for
  // nothing.
  ASSERT_TRUE(t.AddKey(Name(0xa, BlockKey{1, 4})));
  t.AddMeasured(Name(0xa, BlockKey{1, 4}), kBlockHeaderBytes + 6, Head(0xb, BlockKey{1, 4}, 6));
  ASSERT_TRUE(t.AddKey(Name(0xa, BlockKey{1, 5})));
  t.AddMeasured(Name(0xa, BlockKey{1, 5}), kBlockHeaderBytes + 10,
                Head(0xa, BlockKey{1, 5}, 262144));
  EXPECT_EQ(t.bad_headers(), 3u);
  EXPECT_EQ(t.Estimate().payload_bytes, 100u);
}

TEST(RedisTally, AKeyScanReturnsTwiceCountsOnce) {
  RedisTally t("kv", 0);
  const BlockKey a{1, 1};
  EXPECT_TRUE(t.AddKey(Name(0xa, a)));
  EXPECT_FALSE(t.AddKey(Name(0xa, a)));
  EXPECT_FALSE(t.AddKey("kv:notablock"));
  EXPECT_FALSE(t.AddKey("kv:000000000000000A:" + ToHex(a)));  // not the tier's (lower-case) hex
  Measure(t, 0xa, a, 10);
  EXPECT_EQ(t.blocks(), 1u);
  EXPECT_EQ(t.repeats(), 1u);
  EXPECT_EQ(t.other_keys(), 2u);
  EXPECT_EQ(t.Estimate().value_bytes, kBlockHeaderBytes + 10);
}

TEST(RedisTally, NamespacesTheSampleMissedGetTheMeanBlock) {
  RedisTally t("kv", 2);
  // Namespace a: 3 blocks of 4000 (two measured); b: 2 blocks, none measured.
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(t.AddKey(Name(0xa, BlockKey{1, i})), i < 2);
  for (uint64_t i = 0; i < 2; ++i) EXPECT_FALSE(t.AddKey(Name(0xb, BlockKey{2, i})));
  for (uint64_t i = 0; i < 2; ++i) Measure(t, 0xa, BlockKey{1, i}, 4000);
  const RedisEstimate e = t.Estimate();
  EXPECT_TRUE(e.estimated);
  EXPECT_EQ(e.payload_bytes, 5 * 4000u);
  EXPECT_EQ(e.value_bytes, 5 * (4000u + kBlockHeaderBytes));
  ASSERT_EQ(e.namespaces.size(), 2u);
  EXPECT_EQ(e.namespaces[0].id, "000000000000000a");
  EXPECT_EQ(e.namespaces[0].payload_bytes, 3 * 4000u);
  EXPECT_TRUE(e.namespaces[0].estimated);
  EXPECT_EQ(e.namespaces[1].id, "000000000000000b");
  EXPECT_EQ(e.namespaces[1].sampled, 0u);
  EXPECT_EQ(e.namespaces[1].payload_bytes, 2 * 4000u);
  EXPECT_EQ(e.namespaces[1].value_bytes, 2 * (4000u + kBlockHeaderBytes));
  EXPECT_TRUE(e.namespaces[1].estimated);
}

}  // namespace
}  // namespace kvtier::inspect
