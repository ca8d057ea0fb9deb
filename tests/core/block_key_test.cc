#include "kvtier/block_key.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

namespace kvtier {
namespace {

NamespaceSpec Spec() { return NamespaceSpec{"m", "r", "fp16", "nhd", 0, 1, 4}; }

std::vector<int32_t> Tokens() {
  std::vector<int32_t> t;
  for (int i = 0; i < 17; ++i) t.push_back(i * 31 - 7);
  return t;
}

// Hashers that differ from `a` in one input each: `b` the model, `s` the
// algorithm.
struct Hashers {
  KeyHasher a{ComputeNamespaceId(Spec()), HashAlgorithm::kXxh3_128};
  KeyHasher b{ComputeNamespaceId(NamespaceSpec{"other", "r", "fp16", "nhd", 0, 1, 4}),
              HashAlgorithm::kXxh3_128};
  KeyHasher s{ComputeNamespaceId(Spec()), HashAlgorithm::kSha256};
};

TEST(Namespace, EveryFieldChangesTheId) {
  NamespaceId base = ComputeNamespaceId(Spec());
  std::vector<NamespaceSpec> variants(7, Spec());
  variants[0].model_id = "m2";
  variants[1].weights_revision = "r2";
  variants[2].dtype = "bf16";
  variants[3].layout_signature = "hnd";
  variants[4].tp_rank = 0, variants[4].tp_size = 2;
  variants[5].block_tokens = 8;
  variants[6].model_id = "mr", variants[6].weights_revision = "";  // no concatenation alias
  std::set<uint64_t> ids = {base.value};
  for (const auto& v : variants) ids.insert(ComputeNamespaceId(v).value);
  EXPECT_EQ(ids.size(), variants.size() + 1);
  // Two ranks of one tensor-parallel group hold different KV shards: they
  // must never read each other's blocks.
  NamespaceSpec rank0 = Spec(), rank1 = Spec();
  rank0.tp_size = rank1.tp_size = 2;
  rank1.tp_rank = 1;
  EXPECT_NE(ComputeNamespaceId(rank0).value, ComputeNamespaceId(rank1).value);
}

TEST(Namespace, ValidateRejectsBadSpecs) {
  NamespaceSpec s = Spec();
  s.tp_rank = 1;
  EXPECT_EQ(s.Validate().ToString(), "invalid_argument: namespace: tp_rank must be < tp_size");
  s = Spec();
  s.block_tokens = 0;
  EXPECT_FALSE(s.Validate().ok());
}

TEST(BlockKey, ChainIsPrefixSensitive) {
  KeyHasher h(ComputeNamespaceId(Spec()), HashAlgorithm::kXxh3_128);
  auto t = Tokens();
  auto keys = h.Chain(t, 4);
  ASSERT_EQ(keys.size(), 4u);  // 17 tokens: 4 full blocks, the partial one gets no key
  auto t2 = t;
  t2[5] += 1;  // second block differs
  auto keys2 = h.Chain(t2, 4);
  EXPECT_EQ(keys[0], keys2[0]);
  for (size_t i = 1; i < 4; ++i) EXPECT_NE(keys[i], keys2[i]) << i;
  // Same tokens in block 1, but a different parent: different key.
  EXPECT_NE(h.Next(&keys[0], std::span(t).subspan(4, 4)),
            h.Next(nullptr, std::span(t).subspan(4, 4)));
  EXPECT_EQ(h.Next(&keys[0], std::span(t).subspan(4, 4)), keys[1]);
}

TEST(BlockKey, NamespaceAlgorithmAndSourceAllSeparateKeys) {
  auto t = Tokens();
  const auto [a, b, s] = Hashers();
  auto block = std::span(t).first(4);
  EXPECT_NE(a.Next(nullptr, block), b.Next(nullptr, block));
  EXPECT_NE(a.Next(nullptr, block), s.Next(nullptr, block));
  auto bytes = std::as_bytes(block);
  EXPECT_NE(a.Next(nullptr, block), a.NextFromEngineHash(nullptr, bytes));
  EXPECT_EQ(a.NextFromEngineHash(nullptr, bytes), a.NextFromEngineHash(nullptr, bytes));
  std::byte extra[1] = {std::byte{1}};
  EXPECT_NE(a.Next(nullptr, block), a.Next(nullptr, block, extra));
}

// A state checkpoint's parts get keys of their own: apart from the block's
// key, from each other, from any block chained under the boundary, and
// from another namespace's or algorithm's; the same inputs give the same key.
TEST(BlockKey, StatePartKeysAreSeparateAndStable) {
  auto t = Tokens();
  const auto [a, b, s] = Hashers();
  const BlockKey boundary = a.Next(nullptr, std::span(t).first(4));
  const BlockKey p0 = a.StatePart(boundary, 0);
  EXPECT_EQ(p0, a.StatePart(boundary, 0));
  EXPECT_NE(p0, a.StatePart(boundary, 1));
  EXPECT_NE(p0, boundary);
  EXPECT_NE(p0, a.Next(&boundary, std::span(t).subspan(4, 4)));
  std::byte zero[4] = {};
  EXPECT_NE(p0, a.NextFromEngineHash(&boundary, zero));
  EXPECT_NE(p0, a.StatePart(a.Next(nullptr, std::span(t).subspan(4, 4)), 0));
  EXPECT_NE(p0, b.StatePart(boundary, 0));
  EXPECT_NE(p0, s.StatePart(boundary, 0));
}

TEST(BlockKey, HexRoundTripAndErrors) {
  BlockKey k{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(ToHex(k), "0123456789abcdeffedcba9876543210");
  auto back = BlockKeyFromHex(ToHex(k));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, k);
  EXPECT_FALSE(BlockKeyFromHex("abc").ok());
  EXPECT_FALSE(BlockKeyFromHex("0123456789abcdeffedcba987654321g").ok());
  EXPECT_FALSE(ParseHashAlgorithm("md5").ok());
}

std::vector<std::string> KeysFromOtherProcess(const char* algo) {
  std::string cmd = std::string(KVTIER_KEYGEN) + " " + algo;
  FILE* p = popen(cmd.c_str(), "r");
  std::vector<std::string> out;
  if (p == nullptr) return out;
  char line[128];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out.push_back(s);
  }
  EXPECT_EQ(pclose(p), 0);
  return out;
}

TEST(BlockKey, DeterministicAcrossProcesses) {
  for (auto algo : {HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256}) {
    KeyHasher h(ComputeNamespaceId(Spec()), algo);
    auto t = Tokens();
    std::vector<std::string> here;
    for (const BlockKey& k : h.Chain(t, 4)) here.push_back(ToHex(k));
    auto there = KeysFromOtherProcess(std::string(HashAlgorithmName(algo)).c_str());
    EXPECT_EQ(here, there) << HashAlgorithmName(algo);
    EXPECT_EQ(here.size(), 4u);
  }
}

}  // namespace
}  // namespace kvtier
