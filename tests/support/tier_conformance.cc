#include "tests/support/tier_conformance.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "kvtier/block_header.h"
#include "tests/support/block_data.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{0x1234};
constexpr NamespaceId kOtherNs{0x5678};

struct Blocks {
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> data;
  std::vector<WriteOp> ops;
};

Blocks MakeBlocks(uint64_t first, uint64_t count, uint64_t bytes, uint64_t version = 0) {
  Blocks b;
  for (uint64_t i = first; i < first + count; ++i) {
    b.keys.push_back(TestKey(i));
    b.data.push_back(BlockBytes(b.keys.back(), bytes, version));
  }
  for (size_t i = 0; i < b.keys.size(); ++i) b.ops.push_back({b.keys[i], b.data[i]});
  return b;
}

}  // namespace

std::unique_ptr<Tier> TierConformanceTest::Make(uint64_t capacity_blocks) {
  auto tier = GetParam().make(capacity_blocks, kBlockBytes);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

TEST_P(TierConformanceTest, RoundTripIsByteExact) {
  auto tier = Make(16);
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(0, 8, kBlockBytes);
  Completion w = tier->Write(kNs, b.ops);
  ASSERT_TRUE(w.Wait().ok()) << w.status().ToString();
  for (size_t i = 0; i < b.ops.size(); ++i) EXPECT_EQ(w.bytes(i), kBlockBytes);

  std::vector<std::vector<std::byte>> out(8, std::vector<std::byte>(kBlockBytes));
  std::vector<ReadOp> reads;
  for (size_t i = 0; i < 8; ++i) reads.push_back({b.keys[i], out[i]});
  Completion r = tier->Read(kNs, reads);
  ASSERT_TRUE(r.Wait().ok()) << r.status().ToString();
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(r.bytes(i), kBlockBytes);
    EXPECT_EQ(out[i], b.data[i]) << "block " << i;
  }
  EXPECT_EQ(tier->Usage().blocks, 8u);
  tier->Shutdown();
}

// WriteOp::checksum is the payload checksum the caller already took. A tier
// with block headers stores it as given (so a wrong one reads back as
// Corruption, never as bytes); any tier returns the block written with the
// right one byte for byte.
TEST_P(TierConformanceTest, KnownChecksumIsStoredAsGiven) {
  auto tier = Make(16);
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(20, 2, kBlockBytes);
  b.ops[0].checksum = PayloadChecksum(ChecksumKind::kXxh3_64, b.data[0]);
  b.ops[1].checksum = PayloadChecksum(ChecksumKind::kXxh3_64, b.data[1]) ^ 1;
  Completion w = tier->Write(kNs, b.ops);
  ASSERT_TRUE(w.Wait().ok()) << w.status().ToString();

  std::vector<std::vector<std::byte>> out(2, std::vector<std::byte>(kBlockBytes));
  std::vector<ReadOp> reads{{b.keys[0], out[0]}, {b.keys[1], out[1]}};
  Completion r = tier->Read(kNs, reads);
  (void)r.Wait();
  ASSERT_TRUE(r.result(0).ok()) << r.result(0).ToString();
  EXPECT_EQ(out[0], b.data[0]);
  if (tier->capabilities().checksummed) {
    EXPECT_EQ(r.result(1).code(), StatusCode::kCorruption) << r.result(1).ToString();
  } else {
    ASSERT_TRUE(r.result(1).ok()) << r.result(1).ToString();
    EXPECT_EQ(out[1], b.data[1]);
  }
  tier->Shutdown();
}

TEST_P(TierConformanceTest, BatchWithHitsAndMisses) {
  auto tier = Make(16);
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(0, 4, kBlockBytes);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  std::vector<std::vector<std::byte>> out(6, std::vector<std::byte>(kBlockBytes));
  // Keys 0..3 were written; 100 and 101 were not.
  std::vector<BlockKey> keys = {b.keys[0], TestKey(100), b.keys[2], TestKey(101), b.keys[3],
                                b.keys[1]};
  std::vector<ReadOp> reads;
  for (size_t i = 0; i < keys.size(); ++i) reads.push_back({keys[i], out[i]});
  Completion r = tier->Read(kNs, reads);
  (void)r.Wait();
  std::vector<StatusCode> codes;
  for (size_t i = 0; i < keys.size(); ++i) codes.push_back(r.result(i).code());
  EXPECT_EQ(codes, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kNotFound,
                                            StatusCode::kOk, StatusCode::kNotFound,
                                            StatusCode::kOk, StatusCode::kOk}));
  EXPECT_EQ(out[0], b.data[0]);
  EXPECT_EQ(out[2], b.data[2]);
  EXPECT_EQ(out[5], b.data[1]);
  EXPECT_EQ(r.ok_count(), 4u);

  Completion c = tier->Contains(kNs, keys);
  (void)c.Wait();
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(c.result(i).code(), codes[i]) << i;
  tier->Shutdown();
}

TEST_P(TierConformanceTest, FullTierReturnsResourceExhausted) {
  auto tier = Make(4);
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(0, 6, kBlockBytes);
  Completion w = tier->Write(kNs, b.ops);
  (void)w.Wait();
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(w.result(i).ok()) << w.result(i).ToString();
  for (size_t i = 4; i < 6; ++i) EXPECT_EQ(w.result(i).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->Usage().blocks, 4u);
  EXPECT_EQ(tier->Usage().capacity_bytes, 4 * kBlockBytes);
  // A refused block was not stored: it neither answers Contains nor reads.
  std::vector<BlockKey> refused = {b.keys[4], b.keys[5]};
  Completion c = tier->Contains(kNs, refused);
  (void)c.Wait();
  std::vector<std::vector<std::byte>> miss(2, std::vector<std::byte>(kBlockBytes));
  std::vector<ReadOp> miss_reads{{refused[0], miss[0]}, {refused[1], miss[1]}};
  Completion m = tier->Read(kNs, miss_reads);
  (void)m.Wait();
  for (size_t i = 0; i < refused.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kNotFound) << "refused block " << i;
    EXPECT_EQ(m.result(i).code(), StatusCode::kNotFound) << "refused block " << i;
  }
  // A full tier still replaces a key it holds.
  Blocks v1 = MakeBlocks(1, 1, kBlockBytes, /*version=*/1);
  Completion again = tier->Write(kNs, v1.ops);
  ASSERT_TRUE(again.Wait().ok()) << again.status().ToString();
  EXPECT_EQ(again.bytes(0), kBlockBytes);
  std::vector<std::byte> out(kBlockBytes);
  ReadOp rd{v1.keys[0], out};
  ASSERT_TRUE(tier->Read(kNs, std::span(&rd, 1)).Wait().ok());
  EXPECT_EQ(out, v1.data[0]);
  tier->Shutdown();
}

TEST_P(TierConformanceTest, RemoveMakesItMissAndFreesSpace) {
  auto tier = Make(2);
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(0, 2, kBlockBytes);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  std::vector<BlockKey> gone = {b.keys[0], TestKey(999)};  // removing an absent key is OK
  ASSERT_TRUE(tier->Remove(kNs, gone).Wait().ok());
  Completion c = tier->Contains(kNs, b.keys);
  (void)c.Wait();
  EXPECT_EQ(c.result(0).code(), StatusCode::kNotFound);
  EXPECT_TRUE(c.result(1).ok());
  Blocks more = MakeBlocks(10, 1, kBlockBytes);
  EXPECT_TRUE(tier->Write(kNs, more.ops).Wait().ok()) << "removed block's space is reusable";
  EXPECT_EQ(tier->Usage().blocks, 2u);
  tier->Shutdown();
}

TEST_P(TierConformanceTest, OverwriteReplacesAndNamespacesAreIsolated) {
  auto tier = Make(8);
  ASSERT_TRUE(tier);
  Blocks v0 = MakeBlocks(0, 1, kBlockBytes, 0);
  Blocks v1 = MakeBlocks(0, 1, kBlockBytes, 1);
  ASSERT_TRUE(tier->Write(kNs, v0.ops).Wait().ok());
  ASSERT_TRUE(tier->Write(kNs, v1.ops).Wait().ok());
  std::vector<std::byte> out(kBlockBytes);
  ReadOp rd{v0.keys[0], out};
  ASSERT_TRUE(tier->Read(kNs, std::span(&rd, 1)).Wait().ok());
  EXPECT_EQ(out, v1.data[0]);
  EXPECT_EQ(tier->Usage().blocks, 1u);
  Completion other = tier->Read(kOtherNs, std::span(&rd, 1));
  (void)other.Wait();
  EXPECT_EQ(other.result(0).code(), StatusCode::kNotFound);
  tier->Shutdown();
}

// One key in two namespaces is two blocks with their own bytes: writing,
// reading and removing in one leaves the other as it was.
TEST_P(TierConformanceTest, SameKeyInTwoNamespacesIsTwoBlocks) {
  auto tier = Make(8);
  ASSERT_TRUE(tier);
  Blocks mine = MakeBlocks(7, 1, kBlockBytes, /*version=*/0);
  Blocks theirs = MakeBlocks(7, 1, kBlockBytes, /*version=*/3);
  ASSERT_NE(mine.data[0], theirs.data[0]);
  ASSERT_TRUE(tier->Write(kNs, mine.ops).Wait().ok());
  ASSERT_TRUE(tier->Write(kOtherNs, theirs.ops).Wait().ok());
  EXPECT_EQ(tier->Usage().blocks, 2u);

  std::vector<std::byte> out(kBlockBytes);
  ReadOp rd{mine.keys[0], out};
  Completion r = tier->Read(kNs, std::span(&rd, 1));
  ASSERT_TRUE(r.Wait().ok()) << r.status().ToString();
  EXPECT_EQ(out, mine.data[0]) << "namespace " << kNs.value;
  r = tier->Read(kOtherNs, std::span(&rd, 1));
  ASSERT_TRUE(r.Wait().ok()) << r.status().ToString();
  EXPECT_EQ(out, theirs.data[0]) << "namespace " << kOtherNs.value;

  ASSERT_TRUE(tier->Remove(kNs, mine.keys).Wait().ok());
  Completion c = tier->Contains(kNs, mine.keys);
  (void)c.Wait();
  EXPECT_EQ(c.result(0).code(), StatusCode::kNotFound);
  std::fill(out.begin(), out.end(), std::byte{0});
  r = tier->Read(kOtherNs, std::span(&rd, 1));
  ASSERT_TRUE(r.Wait().ok()) << "removing from one namespace removed the other's block: "
                             << r.status().ToString();
  EXPECT_EQ(out, theirs.data[0]);
  EXPECT_EQ(tier->Usage().blocks, 1u);
  tier->Shutdown();
}

TEST_P(TierConformanceTest, BadInputIsRefused) {
  auto tier = Make(4);
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(0, 1, kBlockBytes);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  std::vector<std::byte> small(kBlockBytes - 1);
  ReadOp rd{b.keys[0], small};
  Completion r = tier->Read(kNs, std::span(&rd, 1));
  (void)r.Wait();
  EXPECT_EQ(r.result(0).code(), StatusCode::kInvalidArgument);
  WriteOp empty{TestKey(5), {}};
  Completion w = tier->Write(kNs, std::span(&empty, 1));
  (void)w.Wait();
  EXPECT_EQ(w.result(0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(tier->Read(kNs, {}).Poll()) << "an empty batch completes at once";
  tier->Shutdown();
}

TEST_P(TierConformanceTest, ConcurrentReadersAndWriters) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 24;
  constexpr uint64_t kSmall = 4096;
  auto made = GetParam().make(kThreads * kPerThread, kSmall);
  ASSERT_TRUE(made.ok());
  std::unique_ptr<Tier> tier = std::move(made).value();
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Blocks b = MakeBlocks(t * 1000 + i, 1, kSmall);
        if (!tier->Write(kNs, b.ops).Wait().ok()) wrong.fetch_add(1);
        // Read a block another thread may or may not have written yet.
        BlockKey other = TestKey(((t + 1) % kThreads) * 1000 + i);
        std::vector<std::byte> out(kSmall);
        ReadOp rd{other, out};
        Completion r = tier->Read(kNs, std::span(&rd, 1));
        (void)r.Wait();
        if (r.result(0).ok()) {
          hits.fetch_add(1);
          if (out != BlockBytes(other, kSmall)) wrong.fetch_add(1);
        } else if (r.result(0).code() != StatusCode::kNotFound) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  // Each thread reads key i of the next one after its own write of key i
  // completed. For all of those reads to miss, each thread's write would have
  // to complete before the next one's, all round the ring: so each i hits at
  // least once.
  EXPECT_GE(hits.load(), kPerThread);
  EXPECT_EQ(tier->Usage().blocks, uint64_t{kThreads * kPerThread});
  // Every block reads back as written: two writers handed one slot would
  // leave one of them holding the other's bytes.
  std::vector<BlockKey> keys;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) keys.push_back(TestKey(t * 1000 + i));
  }
  std::vector<std::vector<std::byte>> out(keys.size(), std::vector<std::byte>(kSmall));
  std::vector<ReadOp> reads;
  for (size_t i = 0; i < keys.size(); ++i) reads.push_back({keys[i], out[i]});
  Completion r = tier->Read(kNs, reads);
  (void)r.Wait();
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(r.result(i).ok()) << "block " << i << ": " << r.result(i).ToString();
    EXPECT_EQ(out[i], BlockBytes(keys[i], kSmall)) << "block " << i << " holds other bytes";
  }
  tier->Shutdown();
}

TEST_P(TierConformanceTest, ShutdownDrainsInFlightWork) {
  auto tier = Make(64);
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(0, 32, kBlockBytes);
  std::vector<Completion> pending;
  for (size_t i = 0; i < b.ops.size(); ++i) pending.push_back(tier->Write(kNs, std::span(&b.ops[i], 1)));
  tier->Shutdown();
  for (auto& c : pending) {
    EXPECT_TRUE(c.Poll()) << "Shutdown returned with work in flight";
    EXPECT_TRUE(c.status().ok()) << c.status().ToString();
  }
  Completion late = tier->Write(kNs, b.ops);
  ASSERT_TRUE(late.Poll());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
}

}  // namespace kvtier::testing
