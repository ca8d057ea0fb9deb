// A caller's on_layer callback that throws: the stand-in reports Internal for
// every copy it concerned, still runs `done`, and a Load through the runtime
// completes with those errors instead of ending the process.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvtier/copy_engine.h"
#include "kvtier/runtime.h"
#include "tests/core/runtime_test_util.h"
#include "tests/gpu/layout_test_util.h"
#include "tests/support/block_data.h"

namespace kvtier {
namespace {

using testing::RandomBlock;
using testing::ScatterAndWait;
using testing::SmallLayout;

constexpr NamespaceId kNs{0x6b76};

TEST(HostCopyEngineCallbackTest, ThrowingOnLayerFailsTheCopiesItConcerns) {
  const KvLayout layout = SmallLayout(KvLayoutKind::kVllmNhd);  // 3 layers
  auto created = HostCopyEngine::Create(layout);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<HostCopyEngine> engine = std::move(created).value();
  std::vector<std::byte> a = RandomBlock(layout, 1), b = RandomBlock(layout, 2);
  std::vector<uint32_t> layers;
  const std::vector<BlockCopy> copies = {{1, a}, {2, {}}, {3, b}};  // copy 1 fails its check
  testing::CopyResults r = ScatterAndWait(*engine, copies, [&](uint32_t l) {
    layers.push_back(l);
    if (l == 1) throw std::runtime_error("boom");
  });
  ASSERT_EQ(r.each.size(), 3u);
  EXPECT_EQ(r.each[0].ToString(),
            "internal: host copy engine: load of engine block 1 layer 1: on_layer(1) threw: boom");
  EXPECT_EQ(r.each[1].code(), StatusCode::kInvalidArgument);  // its own error is kept
  EXPECT_EQ(r.each[2].ToString(),
            "internal: host copy engine: load of engine block 3 layer 1: on_layer(1) threw: boom");
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1})) << "no layer is reported after the throw";

  // Not a std::exception either; and the engine serves the next call.
  r = ScatterAndWait(*engine, std::vector<BlockCopy>{{1, a}}, [](uint32_t) { throw 7; });
  ASSERT_EQ(r.each.size(), 1u);
  EXPECT_EQ(r.each[0].ToString(),
            "internal: host copy engine: load of engine block 1 layer 0: on_layer(0) threw: an "
            "exception that is not a std::exception");
  EXPECT_TRUE(ScatterAndWait(*engine, std::vector<BlockCopy>{{1, a}}, nullptr).ok());
  std::vector<std::byte> back(layout.BlockBytes());
  ASSERT_TRUE(engine->ReadBlock(1, back).ok());
  EXPECT_EQ(back, a);
}

// `done` is the caller's code: one that throws once the copies have landed
// must not escape the call (the caller would take every copy as failed),
// as the CUDA engine's completion thread swallows it too.
TEST(HostCopyEngineCallbackTest, ADoneThatThrowsStaysInsideTheCall) {
  const KvLayout layout = SmallLayout(KvLayoutKind::kVllmNhd);
  auto created = HostCopyEngine::Create(layout);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<HostCopyEngine> engine = std::move(created).value();
  std::vector<std::byte> a = RandomBlock(layout, 1);
  const std::vector<BlockCopy> in = {{1, a}};
  int calls = 0;
  auto throwing = [&calls](std::vector<Status>) {
    ++calls;
    throw std::runtime_error("caller bug");
  };
  EXPECT_NO_THROW(engine->Scatter(in, nullptr, throwing));
  std::vector<std::byte> back(layout.BlockBytes());
  const std::vector<BlockCopy> out = {{1, back}};
  EXPECT_NO_THROW(engine->Gather(out, throwing));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(back, a) << "the copies landed before done ran";
}

TEST(HostCopyEngineCallbackTest, LoadWithAThrowingOnLayerCompletesWithInternal) {
  const KvLayout layout{.kind = KvLayoutKind::kVllmNhd,
                        .num_layers = 2,
                        .num_blocks = 16,
                        .block_tokens = 8,
                        .num_kv_heads = 2,
                        .head_size = 32,
                        .elem_bytes = 2};
  auto created = HostCopyEngine::Create(layout);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::shared_ptr<HostCopyEngine> engine = std::move(created).value();
  auto opened = Runtime::Open(testing::MakeOptions(layout.BlockBytes(), 32), engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Runtime> rt = std::move(opened).value();
  const std::vector<BlockKey> keys = {testing::TestKey(0), testing::TestKey(1)};
  for (uint32_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(engine->WriteBlock(i, testing::BlockBytes(keys[i], layout.BlockBytes())).ok());
  }
  Completion save = rt->Save(kNs, std::nullopt, keys, std::vector<uint32_t>{0, 1});
  ASSERT_TRUE(save.WaitFor(std::chrono::seconds(5)).ok());

  const std::vector<uint32_t> into = {8, 9};
  Completion load = rt->Load(kNs, keys, into, std::chrono::seconds(5),
                             [](uint32_t) { throw std::runtime_error("callback bug"); });
  (void)load.WaitFor(std::chrono::seconds(5));
  ASSERT_TRUE(load.Poll()) << "the Load must complete";
  for (size_t i = 0; i < keys.size(); ++i) {
    // The runtime catches it first, whatever copy engine runs the callback.
    EXPECT_EQ(load.result(i).ToString(),
              "internal: load: copy into the engine: on_layer failed: callback bug");
  }
  EXPECT_EQ(rt->Stats().load_failures, 2u);
  // The blocks stay stored and loadable, and the workers still serve.
  Completion again = rt->Load(kNs, keys, into, std::chrono::seconds(5));
  ASSERT_TRUE(again.WaitFor(std::chrono::seconds(5)).ok());
  std::vector<std::byte> got(layout.BlockBytes());
  ASSERT_TRUE(engine->ReadBlock(9, got).ok());
  EXPECT_EQ(got, testing::BlockBytes(keys[1], layout.BlockBytes()));
}

}  // namespace
}  // namespace kvtier
