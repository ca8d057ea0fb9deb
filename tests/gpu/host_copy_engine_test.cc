#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/copy_engine.h"
#include "tests/gpu/layout_test_util.h"

namespace kvtier {
namespace {

using testing::FillPattern;
using testing::ForEachRow;
using testing::RandomBlock;
using testing::RefBlockOfByte;
using testing::RefEngine;
using testing::RefHost;
using testing::RowBytes;
using testing::SmallLayout;
using testing::Snapshot;

constexpr auto& kKinds = kAllKvLayoutKinds;

std::unique_ptr<HostCopyEngine> MakeEngine(const KvLayout& l) {
  Result<std::unique_ptr<HostCopyEngine>> engine = HostCopyEngine::Create(l);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

using Results = testing::CopyResults;

// Runs Gather and returns what `done` got; fails if done ran != once or the
// result count is not the copy count.
Results GatherSync(CopyEngine& engine, std::vector<BlockCopy> copies) {
  int calls = 0;
  Results result;
  engine.Gather(copies, [&](std::vector<Status> st) {
    ++calls;
    result.each = std::move(st);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result.each.size(), copies.size());
  return result;
}

Results ScatterSync(CopyEngine& engine, std::vector<BlockCopy> copies,
                    std::vector<uint32_t>* layers = nullptr) {
  int calls = 0;
  Results result;
  LayerDone on_layer;
  if (layers != nullptr) on_layer = [layers](uint32_t l) { layers->push_back(l); };
  engine.Scatter(copies, on_layer, [&](std::vector<Status> st) {
    ++calls;
    result.each = std::move(st);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result.each.size(), copies.size());
  return result;
}

// True when row (layer, kv, token, head) of engine block `block` holds the
// same bytes as that row of `host`.
bool RowMatches(HostCopyEngine& engine, uint32_t block, std::span<const std::byte> host,
                uint32_t layer, uint32_t kv, uint32_t t, uint32_t h) {
  const KvLayout& l = engine.layout();
  const testing::EnginePos pos = RefEngine(l, block, layer, kv, t, h);
  return std::memcmp(engine.Tensor(pos.tensor).data() + pos.offset,
                     host.data() + RefHost(l, layer, kv, t, h), RowBytes(l)) == 0;
}

TEST(HostCopyEngineTest, CreateGivesZeroedPoolShapedLikeTheLayout) {
  for (KvLayoutKind kind : kKinds) {
    const KvLayout l = SmallLayout(kind);
    auto engine = MakeEngine(l);
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(engine->layout().Signature(), l.Signature());
    for (uint32_t t = 0; t < EngineTensorCount(l); ++t) {
      std::span<std::byte> tensor = engine->Tensor(t);
      ASSERT_EQ(tensor.size(), EngineTensorBytes(l));
      for (std::byte b : tensor) ASSERT_EQ(b, std::byte{0});
    }
    EXPECT_TRUE(engine->Tensor(EngineTensorCount(l)).empty());
  }
}

TEST(HostCopyEngineTest, GatherPutsEveryEngineElementAtItsHostPosition) {
  for (KvLayoutKind kind : kKinds) {
    const KvLayout l = SmallLayout(kind);
    auto engine = MakeEngine(l);
    ASSERT_NE(engine, nullptr);
    FillPattern(*engine);
    for (uint32_t block = 0; block < l.num_blocks; ++block) {
      std::vector<std::byte> host(l.BlockBytes(), std::byte{0xee});
      ASSERT_TRUE(GatherSync(*engine, {{block, host}}).ok());
      ForEachRow(l, [&](uint32_t layer, uint32_t kv, uint32_t t, uint32_t h) {
        const testing::EnginePos pos = RefEngine(l, block, layer, kv, t, h);
        const uint64_t host_off = RefHost(l, layer, kv, t, h);
        for (uint64_t i = 0; i < RowBytes(l); ++i) {
          ASSERT_EQ(host[host_off + i], engine->Tensor(pos.tensor)[pos.offset + i])
              << KvLayoutKindName(kind) << " block " << block << " layer " << layer << " kv " << kv
              << " token " << t << " head " << h << " byte " << i;
        }
      });
    }
  }
}

TEST(HostCopyEngineTest, ScatterThenGatherRoundTrips) {
  for (KvLayoutKind kind : kKinds) {
    const KvLayout l = SmallLayout(kind);
    auto engine = MakeEngine(l);
    ASSERT_NE(engine, nullptr);
    FillPattern(*engine);
    std::vector<std::byte> a = RandomBlock(l, 1), b = RandomBlock(l, 2);
    ASSERT_TRUE(ScatterSync(*engine, {{3, a}, {1, b}}).ok());
    std::vector<std::byte> a2(l.BlockBytes()), b2(l.BlockBytes());
    ASSERT_TRUE(GatherSync(*engine, {{3, a2}, {1, b2}}).ok());
    EXPECT_EQ(a2, a) << KvLayoutKindName(kind);
    EXPECT_EQ(b2, b) << KvLayoutKindName(kind);
    // The synchronous helpers move the same bytes.
    std::vector<std::byte> via_read(l.BlockBytes());
    ASSERT_TRUE(engine->ReadBlock(1, via_read).ok());
    EXPECT_EQ(via_read, b);
    ASSERT_TRUE(engine->WriteBlock(0, a).ok());
    ASSERT_TRUE(GatherSync(*engine, {{0, via_read}}).ok());
    EXPECT_EQ(via_read, a);
  }
}

TEST(HostCopyEngineTest, SaveFromOneBlockLoadIntoAnotherTouchesOnlyTheTarget) {
  for (KvLayoutKind kind : kKinds) {
    const KvLayout l = SmallLayout(kind);
    auto engine = MakeEngine(l);
    ASSERT_NE(engine, nullptr);
    FillPattern(*engine);
    constexpr uint32_t kFrom = 1, kTo = 4;
    std::vector<std::byte> saved(l.BlockBytes());
    ASSERT_TRUE(GatherSync(*engine, {{kFrom, saved}}).ok());
    const auto before = Snapshot(*engine);
    ASSERT_TRUE(ScatterSync(*engine, {{kTo, saved}}).ok());
    ForEachRow(l, [&](uint32_t layer, uint32_t kv, uint32_t t, uint32_t h) {
      const testing::EnginePos from = RefEngine(l, kFrom, layer, kv, t, h);
      const testing::EnginePos to = RefEngine(l, kTo, layer, kv, t, h);
      EXPECT_EQ(std::memcmp(engine->Tensor(from.tensor).data() + from.offset,
                            engine->Tensor(to.tensor).data() + to.offset, RowBytes(l)),
                0);
    });
    const auto after = Snapshot(*engine);
    uint64_t changed = 0;
    for (size_t t = 0; t < after.size(); ++t) {
      for (uint64_t i = 0; i < after[t].size(); ++i) {
        if (after[t][i] == before[t][i]) continue;
        ++changed;
        ASSERT_EQ(RefBlockOfByte(l, i), kTo)
            << KvLayoutKindName(kind) << " tensor " << t << " byte " << i;
      }
    }
    // Pattern ids are unique per element, so every element of block kTo
    // changed in at least one byte.
    EXPECT_GE(changed, l.BlockBytes() / l.elem_bytes) << KvLayoutKindName(kind);
  }
}

TEST(HostCopyEngineTest, OnLayerRunsOncePerLayerInOrderAfterThatLayerLanded) {
  for (KvLayoutKind kind : kKinds) {
    const KvLayout l = SmallLayout(kind);
    auto engine = MakeEngine(l);
    ASSERT_NE(engine, nullptr);
    std::vector<std::byte> a = RandomBlock(l, 7), b = RandomBlock(l, 8);
    const std::vector<BlockCopy> copies = {{2, a}, {0, b}};
    std::vector<std::string> events;
    engine->Scatter(
        copies,
        [&](uint32_t layer) {
          events.push_back("layer " + std::to_string(layer));
          for (const BlockCopy& c : copies) {
            ForEachRow(l, [&](uint32_t ly, uint32_t kv, uint32_t t, uint32_t h) {
              // Rows of landed layers match; later layers are still zero
              // (the host blocks hold no zero byte).
              const bool matches = RowMatches(*engine, c.engine_block, c.host, ly, kv, t, h);
              EXPECT_EQ(matches, ly <= layer)
                  << KvLayoutKindName(kind) << " at layer " << layer << " row layer " << ly;
            });
          }
        },
        [&](std::vector<Status> st) {
          events.push_back("done " + st[0].ToString() + " " + st[1].ToString());
        });
    const std::vector<std::string> expected = {"layer 0", "layer 1", "layer 2", "done ok ok"};
    EXPECT_EQ(events, expected) << KvLayoutKindName(kind);
  }
}

TEST(HostCopyEngineTest, EmptyOnLayerAndEmptyBatch) {
  const KvLayout l = SmallLayout(KvLayoutKind::kVllmHnd);
  auto engine = MakeEngine(l);
  ASSERT_NE(engine, nullptr);
  std::vector<std::byte> a = RandomBlock(l, 3);
  EXPECT_TRUE(ScatterSync(*engine, {{4, a}}).ok());
  std::vector<uint32_t> layers;
  EXPECT_TRUE(ScatterSync(*engine, {}, &layers).ok());
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_TRUE(GatherSync(*engine, {}).ok());
}

class HostCopyEngineErrorTest : public ::testing::TestWithParam<KvLayoutKind> {};

// Every byte of the pool that changed belongs to one of `blocks`.
void ExpectOnlyBlocksChanged(HostCopyEngine& engine,
                             const std::vector<std::vector<std::byte>>& before,
                             const std::vector<uint32_t>& blocks) {
  const KvLayout& l = engine.layout();
  const auto after = Snapshot(engine);
  for (size_t t = 0; t < after.size(); ++t) {
    for (uint64_t i = 0; i < after[t].size(); ++i) {
      if (after[t][i] == before[t][i]) continue;
      const uint32_t block = RefBlockOfByte(l, i);
      ASSERT_NE(std::find(blocks.begin(), blocks.end(), block), blocks.end())
          << KvLayoutKindName(l.kind) << " tensor " << t << " byte " << i << " of block " << block;
    }
  }
}

TEST_P(HostCopyEngineErrorTest, BadCopiesFailAloneAndTheOthersMove) {
  const KvLayout l = SmallLayout(GetParam());
  auto engine = MakeEngine(l);
  ASSERT_NE(engine, nullptr);
  FillPattern(*engine);
  const auto before = Snapshot(*engine);
  std::vector<std::byte> good = RandomBlock(l, 5), other = RandomBlock(l, 6);
  std::vector<std::byte> short_buf(l.BlockBytes() - 1, std::byte{0x11});
  std::vector<std::byte> long_buf(l.BlockBytes() + 1, std::byte{0x11});
  std::vector<uint32_t> layers;

  EXPECT_EQ(
      ScatterSync(*engine, {{0, good}, {5, other}, {2, short_buf}, {3, other}, {0, other}}, &layers)
          .ToString(),
      "ok | invalid_argument: copy 1: engine block 5 out of range [0, 5) | "
      "invalid_argument: copy 2 (engine block 2): host buffer is 287 bytes; a block is 288 "
      "bytes | ok | invalid_argument: copy 4 (engine block 0): engine block 0 is already the "
      "target of copy 0");
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1, 2}));
  ExpectOnlyBlocksChanged(*engine, before, {0, 3});
  std::vector<std::byte> got(l.BlockBytes());
  ASSERT_TRUE(engine->ReadBlock(0, got).ok());
  EXPECT_EQ(got, good);
  ASSERT_TRUE(engine->ReadBlock(3, got).ok());
  EXPECT_EQ(got, other);

  // Gather: out of range, wrong size, and a buffer overlapping copy 0's.
  std::vector<std::byte> two(2 * l.BlockBytes(), std::byte{0x22});
  std::span<std::byte> first = std::span(two).first(l.BlockBytes());
  std::span<std::byte> overlapping = std::span(two).subspan(100, l.BlockBytes());
  std::vector<std::byte> spare(l.BlockBytes(), std::byte{0x33});
  EXPECT_EQ(
      GatherSync(*engine,
                 {{1, first}, {4294967295u, spare}, {2, long_buf}, {4, overlapping}, {3, good}})
          .ToString(),
      "ok | invalid_argument: copy 1: engine block 4294967295 out of range [0, 5) | "
      "invalid_argument: copy 2 (engine block 2): host buffer is 289 bytes; a block is 288 "
      "bytes | invalid_argument: copy 3 (engine block 4): host buffer overlaps the one of "
      "copy 0 | ok");
  ASSERT_TRUE(engine->ReadBlock(1, got).ok());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), got.begin()));
  EXPECT_TRUE(std::all_of(two.begin() + l.BlockBytes(), two.end(),
                          [](std::byte b) { return b == std::byte{0x22}; }));
  EXPECT_EQ(spare, std::vector<std::byte>(l.BlockBytes(), std::byte{0x33}));
  EXPECT_EQ(long_buf, std::vector<std::byte>(l.BlockBytes() + 1, std::byte{0x11}));
  EXPECT_EQ(good, other);  // block 3 holds `other`
  // Reading the same block twice is fine.
  std::vector<std::byte> again(l.BlockBytes());
  EXPECT_TRUE(GatherSync(*engine, {{1, spare}, {1, again}}).ok());
  EXPECT_EQ(spare, again);

  EXPECT_EQ(engine->WriteBlock(5, good).ToString(),
            "invalid_argument: engine block 5 out of range [0, 5)");
  EXPECT_EQ(engine->ReadBlock(0, short_buf).ToString(),
            "invalid_argument: host buffer is 287 bytes; a block is 288 bytes");
  EXPECT_EQ(short_buf, std::vector<std::byte>(l.BlockBytes() - 1, std::byte{0x11}));
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, HostCopyEngineErrorTest, ::testing::ValuesIn(kKinds),
                         [](const auto& info) {
                           return std::string(KvLayoutKindName(info.param));
                         });

TEST(HostCopyEngineTest, CreateRejectsInvalidLayouts) {
  KvLayout l = SmallLayout(KvLayoutKind::kVllmNhd);
  l.head_size = 0;
  EXPECT_EQ(HostCopyEngine::Create(l).status().ToString(),
            "invalid_argument: host copy engine: kv layout: head_size is 0");
  l = SmallLayout(KvLayoutKind::kCrossLayer);
  l.elem_bytes = 3;
  EXPECT_EQ(HostCopyEngine::Create(l).status().ToString(),
            "invalid_argument: host copy engine: kv layout: elem_bytes is 3; must be 1, 2 or 4");
  l = SmallLayout(KvLayoutKind::kVllmHnd);
  l.num_blocks = 0xffffffffu;
  l.head_size = 0xffffffffu;
  EXPECT_EQ(HostCopyEngine::Create(l).status().ToString(),
            "invalid_argument: host copy engine: kv layout: engine cache size (num_blocks * "
            "BlockBytes()) exceeds 2^48 bytes");
}

TEST(HostCopyEngineTest, PoolLargerThanTheAddressSpaceIsResourceExhausted) {
  // 2 * 96 layers * 2^25 blocks * 16 tokens * 8 heads * 128 * 2 bytes = 3 * 2^46:
  // valid (< 2^48) but beyond a 47-bit user address space.
  KvLayout l;
  l.kind = KvLayoutKind::kVllmNhd;
  l.num_layers = 96;
  l.num_blocks = 1u << 25;
  l.block_tokens = 16;
  l.num_kv_heads = 8;
  l.head_size = 128;
  l.elem_bytes = 2;
  ASSERT_TRUE(l.Validate().ok());
  Result<std::unique_ptr<HostCopyEngine>> engine = HostCopyEngine::Create(l);
  if (engine.ok()) GTEST_SKIP() << "this machine maps 3 * 2^46 bytes";
  EXPECT_EQ(engine.status().ToString(),
            "resource_exhausted: host copy engine: cannot allocate a pool of " +
                std::to_string(uint64_t{3} << 46) + " bytes: " + std::strerror(ENOMEM));
}

// Calls on distinct engine blocks from several threads at once.
TEST(HostCopyEngineTest, ConcurrentCallsOnDistinctBlocks) {
  for (KvLayoutKind kind : kKinds) {
    const KvLayout l = SmallLayout(kind);
    auto engine = MakeEngine(l);
    ASSERT_NE(engine, nullptr);
    std::vector<std::thread> threads;
    std::vector<int> mismatches(l.num_blocks, 0);
    for (uint32_t block = 0; block < l.num_blocks; ++block) {
      threads.emplace_back([&, block] {
        for (uint32_t round = 0; round < 200; ++round) {
          std::vector<std::byte> in = RandomBlock(l, block * 1000 + round);
          std::vector<std::byte> out(l.BlockBytes());
          engine->Scatter(std::vector<BlockCopy>{{block, in}}, nullptr, [](std::vector<Status>) {});
          engine->Gather(std::vector<BlockCopy>{{block, out}}, [](std::vector<Status>) {});
          if (in != out) ++mismatches[block];
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(mismatches, std::vector<int>(l.num_blocks, 0)) << KvLayoutKindName(kind);
  }
}

}  // namespace
}  // namespace kvtier
