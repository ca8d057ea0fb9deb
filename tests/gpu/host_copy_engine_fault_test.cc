// The stand-in's fault hook: a failing block fails alone and the others move
// their bytes; a sticky fault (a lost device) fails every block not yet
// complete, and every later call until the hook is replaced.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvtier/copy_engine.h"
#include "tests/gpu/layout_test_util.h"

namespace kvtier {
namespace {

using testing::FillPattern;
using testing::GatherAndWait;
using testing::RandomBlock;
using testing::ScatterAndWait;
using testing::SmallLayout;

// Fails (block, layer) with IOError("injected"); sticky if asked.
CopyFaultHook FailAt(uint32_t block, uint32_t layer, bool sticky) {
  return [=](uint32_t b, uint32_t l) {
    if (b == block && l == layer) return CopyFault{Status::IOError("injected"), sticky};
    return CopyFault{};
  };
}

class HostCopyEngineFaultTest : public ::testing::TestWithParam<KvLayoutKind> {
 protected:
  void SetUp() override {
    layout_ = SmallLayout(GetParam());
    auto engine = HostCopyEngine::Create(layout_);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
    FillPattern(*engine_);
  }
  std::vector<std::byte> Block(uint32_t b) {
    std::vector<std::byte> out(layout_.BlockBytes());
    EXPECT_TRUE(engine_->ReadBlock(b, out).ok());
    return out;
  }
  // Host buffers of `n` blocks, every byte 0x5a.
  std::vector<std::vector<std::byte>> Buffers(size_t n) {
    return std::vector<std::vector<std::byte>>(
        n, std::vector<std::byte>(layout_.BlockBytes(), std::byte{0x5a}));
  }

  KvLayout layout_;
  std::unique_ptr<HostCopyEngine> engine_;
};

TEST_P(HostCopyEngineFaultTest, GatherFaultFailsOnlyThatBlock) {
  engine_->TEST_SetFaultHook(FailAt(2, 1, /*sticky=*/false));
  auto host = Buffers(3);
  const std::vector<BlockCopy> copies = {{1, host[0]}, {2, host[1]}, {3, host[2]}};
  EXPECT_EQ(GatherAndWait(*engine_, copies).ToString(),
            "ok | io_error: host copy engine: save of engine block 2: injected | ok");
  EXPECT_EQ(host[0], Block(1));
  EXPECT_EQ(host[1], Buffers(1)[0]);  // untouched
  EXPECT_EQ(host[2], Block(3));
  // The next call is not affected.
  engine_->TEST_SetFaultHook(nullptr);
  EXPECT_TRUE(GatherAndWait(*engine_, copies).ok());
  EXPECT_EQ(host[1], Block(2));
}

TEST_P(HostCopyEngineFaultTest, ScatterFaultFailsOnlyThatBlockAndLayersStillFire) {
  engine_->TEST_SetFaultHook(FailAt(2, 1, /*sticky=*/false));
  std::vector<std::byte> a = RandomBlock(layout_, 1), b = RandomBlock(layout_, 2),
                         c = RandomBlock(layout_, 3);
  std::vector<uint32_t> layers;
  EXPECT_EQ(ScatterAndWait(*engine_, std::vector<BlockCopy>{{1, a}, {2, b}, {4, c}},
                           [&](uint32_t l) { layers.push_back(l); })
                .ToString(),
            "ok | io_error: host copy engine: load of engine block 2 layer 1: injected | ok");
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(Block(1), a);
  EXPECT_EQ(Block(4), c);
  EXPECT_NE(Block(2), b);  // layer 0 landed, layers 1 and 2 did not
}

TEST_P(HostCopyEngineFaultTest, StickyGatherFaultFailsTheRestAndLaterCalls) {
  engine_->TEST_SetFaultHook(FailAt(2, 0, /*sticky=*/true));
  auto host = Buffers(4);
  const std::vector<BlockCopy> copies = {{0, host[0]}, {1, host[1]}, {2, host[2]}, {3, host[3]}};
  EXPECT_EQ(GatherAndWait(*engine_, copies).ToString(),
            "ok | ok | io_error: host copy engine: save of engine block 2: injected | "
            "io_error: host copy engine: save of engine block 3: injected");
  EXPECT_EQ(host[0], Block(0));
  EXPECT_EQ(host[1], Block(1));
  EXPECT_EQ(host[2], Buffers(1)[0]);
  EXPECT_EQ(host[3], Buffers(1)[0]);
  // Lost until the hook is replaced; bad copies still fail with their own
  // message.
  std::vector<std::byte> small(layout_.BlockBytes() - 1);
  EXPECT_EQ(GatherAndWait(*engine_, std::vector<BlockCopy>{{4, host[0]}, {0, small}}).ToString(),
            "io_error: host copy engine: save of engine block 4: injected | "
            "invalid_argument: copy 1 (engine block 0): host buffer is " +
                std::to_string(layout_.BlockBytes() - 1) + " bytes; a block is " +
                std::to_string(layout_.BlockBytes()) + " bytes");
  engine_->TEST_SetFaultHook(nullptr);
  EXPECT_TRUE(GatherAndWait(*engine_, copies).ok());
  EXPECT_EQ(host[3], Block(3));
}

// No block is complete before its last layer: a sticky fault in layer 1
// fails them all and stops the layer reports; one in the last layer spares
// the blocks whose last layer already landed.
TEST_P(HostCopyEngineFaultTest, StickyScatterFaultFailsEveryIncompleteBlock) {
  std::vector<std::byte> a = RandomBlock(layout_, 1), b = RandomBlock(layout_, 2),
                         c = RandomBlock(layout_, 3);
  const std::vector<BlockCopy> copies = {{1, a}, {2, b}, {4, c}};
  std::vector<uint32_t> layers;
  auto on_layer = [&](uint32_t l) { layers.push_back(l); };
  engine_->TEST_SetFaultHook(FailAt(2, 1, /*sticky=*/true));
  EXPECT_EQ(ScatterAndWait(*engine_, copies, on_layer).ToString(),
            "io_error: host copy engine: load of engine block 1 layer 1: injected | "
            "io_error: host copy engine: load of engine block 2 layer 1: injected | "
            "io_error: host copy engine: load of engine block 4 layer 1: injected");
  EXPECT_EQ(layers, (std::vector<uint32_t>{0}));

  layers.clear();
  engine_->TEST_SetFaultHook(FailAt(2, 2, /*sticky=*/true));
  EXPECT_EQ(ScatterAndWait(*engine_, copies, on_layer).ToString(),
            "ok | io_error: host copy engine: load of engine block 2 layer 2: injected | "
            "io_error: host copy engine: load of engine block 4 layer 2: injected");
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(Block(1), a);
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, HostCopyEngineFaultTest,
                         ::testing::ValuesIn(kAllKvLayoutKinds), [](const auto& info) {
                           return std::string(KvLayoutKindName(info.param));
                         });

}  // namespace
}  // namespace kvtier
