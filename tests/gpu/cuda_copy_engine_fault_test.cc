// Per-block errors of the CUDA copy engine, on a device: the fault hook
// stands in for the CUDA call of one block, which must then fail alone (with
// the CUDA error text) while the other blocks land byte for byte; a sticky
// error fails every block in flight and every later call. One test runs the
// same through the runtime; the last one takes the kernel's descriptor table
// away, which must send the batch by DMA. Every test skips without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/cuda/cuda_copy_engine.h"
#include "gpu/cuda/cuda_util.h"
#include "kvtier/copy_engine.h"
#include "kvtier/runtime.h"
#include "tests/core/runtime_test_util.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/layout_test_util.h"
#include "tests/support/block_data.h"

namespace kvtier {
namespace {

using testing::CopyResults;
using testing::DeviceTensors;

struct Case {
  KvLayoutKind kind;
  CudaCopyPath path;
};

// "<what>: <name>: <text>" as FromCuda writes it.
std::string CudaText(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

class CudaCopyEngineFaultTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    layout_ = testing::SmallLayout(GetParam().kind);
    layout_.num_blocks = 16;
    layout_.block_tokens = 16;
    layout_.head_size = GetParam().kind == KvLayoutKind::kMla ? 576 : 64;
    auto ref = HostCopyEngine::Create(layout_);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ref_ = std::move(ref).value();
    testing::FillRandom(*ref_, 23);
    device_ = std::make_unique<DeviceTensors>(*ref_);
    CudaCopyEngineOptions o;
    o.layout = layout_;
    o.tensors = device_->ptrs();
    o.path = GetParam().path;
    auto engine = cuda::TEST_CreateCudaCopyEngine(o, [this](uint32_t block, uint32_t layer) {
      return block == fail_block_.load() && layer == fail_layer_.load() ? fail_with_.load()
                                                                        : cudaSuccess;
    });
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }
  void TearDown() override {
    engine_.reset();  // drains before the tensors go
    device_.reset();
  }
  void FailAt(uint32_t block, uint32_t layer, cudaError_t err) {
    fail_block_ = block;
    fail_layer_ = layer;
    fail_with_ = err;
  }
  std::vector<cuda::PinnedBuffer> Pinned(size_t n, std::byte fill) {
    std::vector<cuda::PinnedBuffer> out;
    for (size_t i = 0; i < n; ++i) {
      auto b = cuda::PinnedBuffer::Allocate(layout_.BlockBytes());
      EXPECT_TRUE(b.ok()) << b.status().ToString();
      if (!b.ok()) break;
      std::memset(b->data(), static_cast<int>(fill), b->size());
      out.push_back(std::move(b).value());
    }
    return out;
  }
  std::vector<std::byte> RefBlock(uint32_t b) {
    std::vector<std::byte> out(layout_.BlockBytes());
    EXPECT_TRUE(ref_->ReadBlock(b, out).ok());
    return out;
  }

  KvLayout layout_;
  std::unique_ptr<HostCopyEngine> ref_;
  std::unique_ptr<DeviceTensors> device_;
  std::unique_ptr<CopyEngine> engine_;
  std::atomic<uint32_t> fail_block_{~0u};
  std::atomic<uint32_t> fail_layer_{0};
  std::atomic<cudaError_t> fail_with_{cudaSuccess};
};

bool Equal(const cuda::PinnedBuffer& b, const std::vector<std::byte>& want) {
  return b.size() == want.size() && std::memcmp(b.data(), want.data(), want.size()) == 0;
}

TEST_P(CudaCopyEngineFaultTest, GatherFaultFailsOnlyThatBlock) {
  FailAt(2, 1, cudaErrorInvalidValue);
  std::vector<cuda::PinnedBuffer> host = Pinned(3, std::byte{0x5a});
  ASSERT_EQ(host.size(), 3u);
  const std::vector<BlockCopy> copies = {
      {1, host[0].span()}, {2, host[1].span()}, {3, host[2].span()}};
  const CopyResults r = testing::GatherAndWait(*engine_, copies);
  EXPECT_EQ(r.ToString(),
            "ok | invalid_argument: cuda copy engine: save of engine block 2: fault hook: " +
                CudaText(cudaErrorInvalidValue) + " | ok");
  EXPECT_TRUE(Equal(host[0], RefBlock(1)));
  EXPECT_TRUE(Equal(host[1], std::vector<std::byte>(layout_.BlockBytes(), std::byte{0x5a})));
  EXPECT_TRUE(Equal(host[2], RefBlock(3)));
}

TEST_P(CudaCopyEngineFaultTest, ScatterFaultFailsOnlyThatBlockAndLayersStillFire) {
  FailAt(9, 1, cudaErrorInvalidValue);
  std::vector<cuda::PinnedBuffer> host = Pinned(3, std::byte{0});
  ASSERT_EQ(host.size(), 3u);
  const std::vector<uint32_t> blocks = {8, 9, 12};
  std::vector<BlockCopy> copies;
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::vector<std::byte> r = testing::RandomBlock(layout_, 40 + i);
    std::memcpy(host[i].data(), r.data(), r.size());
    copies.push_back({blocks[i], host[i].span()});
  }
  std::vector<uint32_t> layers;  // written by the completion thread only
  const CopyResults r =
      testing::ScatterAndWait(*engine_, copies, [&](uint32_t l) { layers.push_back(l); });
  EXPECT_EQ(r.ToString(),
            "ok | invalid_argument: cuda copy engine: load of engine block 9 layer 1: fault "
            "hook: " +
                CudaText(cudaErrorInvalidValue) + " | ok");
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1, 2}));
  device_->DownloadInto(*ref_);
  EXPECT_TRUE(Equal(host[0], RefBlock(8)));
  EXPECT_TRUE(Equal(host[2], RefBlock(12)));
  EXPECT_FALSE(Equal(host[1], RefBlock(9)));  // layers 1 and 2 never went out
}

// An injected sticky error stands for a lost context: the whole batch (one
// segment for a save) fails, and so does every later call.
TEST_P(CudaCopyEngineFaultTest, StickyErrorFailsTheBatchAndLaterCalls) {
  FailAt(2, 0, cudaErrorIllegalAddress);
  std::vector<cuda::PinnedBuffer> host = Pinned(3, std::byte{0x5a});
  ASSERT_EQ(host.size(), 3u);
  const std::vector<BlockCopy> copies = {
      {1, host[0].span()}, {2, host[1].span()}, {3, host[2].span()}};
  const std::string text = "fault hook: " + CudaText(cudaErrorIllegalAddress);
  EXPECT_EQ(testing::GatherAndWait(*engine_, copies).ToString(),
            "io_error: cuda copy engine: save of engine block 1: " + text +
                " | io_error: cuda copy engine: save of engine block 2: " + text +
                " | io_error: cuda copy engine: save of engine block 3: " + text);
  FailAt(~0u, 0, cudaSuccess);
  std::vector<uint32_t> layers;
  EXPECT_EQ(testing::ScatterAndWait(*engine_, std::vector<BlockCopy>{{5, host[0].span()}},
                                    [&](uint32_t l) { layers.push_back(l); })
                .ToString(),
            "io_error: cuda copy engine: load of engine block 5: " + text);
  EXPECT_TRUE(layers.empty());  // a lost device reports no layer
}

// As on the host engine: a sticky error while issuing layer 1 fails every
// block (none has all its layers), each named with layer 1, and layer 0,
// which landed before it, is still reported.
TEST_P(CudaCopyEngineFaultTest, StickyScatterFaultFailsEveryIncompleteBlock) {
  FailAt(2, 1, cudaErrorIllegalAddress);
  std::vector<cuda::PinnedBuffer> host = Pinned(3, std::byte{0});
  ASSERT_EQ(host.size(), 3u);
  const std::vector<uint32_t> blocks = {1, 2, 4};
  std::vector<BlockCopy> copies;
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::vector<std::byte> r = testing::RandomBlock(layout_, 60 + i);
    std::memcpy(host[i].data(), r.data(), r.size());
    copies.push_back({blocks[i], host[i].span()});
  }
  std::vector<uint32_t> layers;
  const CopyResults r =
      testing::ScatterAndWait(*engine_, copies, [&](uint32_t l) { layers.push_back(l); });
  const std::string text = ": fault hook: " + CudaText(cudaErrorIllegalAddress);
  EXPECT_EQ(r.ToString(),
            "io_error: cuda copy engine: load of engine block 1 layer 1" + text +
                " | io_error: cuda copy engine: load of engine block 2 layer 1" + text +
                " | io_error: cuda copy engine: load of engine block 4 layer 1" + text);
  EXPECT_EQ(layers, (std::vector<uint32_t>{0}));
  device_->DownloadInto(*ref_);
  const size_t layer0 = size_t{layout_.Planes()} * layout_.PageBytes();
  EXPECT_EQ(std::memcmp(RefBlock(1).data(), host[0].data(), layer0), 0);
}

std::string Results(const Completion& c) {
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) out += (i ? " | " : "") + c.result(i).ToString();
  return out;
}

// Save and Load through a runtime whose copy engine is this CUDA engine (its
// hub arena registered through PinHostMemory).
TEST_P(CudaCopyEngineFaultTest, ThroughTheRuntimeOnlyTheFaultyBlockFails) {
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 4; ++i) {
    keys.push_back(testing::TestKey(i));
    ASSERT_TRUE(ref_->WriteBlock(i, testing::BlockBytes(keys[i], layout_.BlockBytes())).ok());
  }
  device_->Upload();
  auto rt = Runtime::Open(testing::MakeOptions(layout_.BlockBytes(), 16),
                          std::shared_ptr<CopyEngine>(std::move(engine_)));
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  const NamespaceId ns{7};
  const std::vector<uint32_t> from = {0, 1, 2, 3}, to = {8, 9, 10, 11};
  Completion saved = (*rt)->Save(ns, std::nullopt, keys, from);
  ASSERT_TRUE(saved.WaitFor(std::chrono::seconds(20)).ok()) << Results(saved);

  FailAt(10, 1, cudaErrorInvalidValue);
  Completion loaded = (*rt)->Load(ns, keys, to, std::chrono::seconds(20));
  (void)loaded.WaitFor(std::chrono::seconds(20));
  ASSERT_TRUE(loaded.Poll());
  EXPECT_EQ(Results(loaded),
            "ok | ok | invalid_argument: load: copy into the engine: cuda copy engine: load of "
            "engine block 10 layer 1: fault hook: " +
                CudaText(cudaErrorInvalidValue) + " | ok");
  EXPECT_EQ(loaded.layers_done(), layout_.num_layers);
  device_->DownloadInto(*ref_);
  for (size_t i : {0, 1, 3}) {
    EXPECT_EQ(RefBlock(to[i]), testing::BlockBytes(keys[i], layout_.BlockBytes())) << "key " << i;
  }
  EXPECT_NE(RefBlock(10), testing::BlockBytes(keys[2], layout_.BlockBytes()));

  // A save whose second block fails stores only the first.
  FailAt(5, 0, cudaErrorInvalidValue);
  const std::vector<BlockKey> more = {testing::TestKey(20), testing::TestKey(21),
                                      testing::TestKey(22)};
  Completion partial = (*rt)->Save(ns, keys.back(), more, std::vector<uint32_t>{4, 5, 6});
  (void)partial.WaitFor(std::chrono::seconds(20));
  ASSERT_TRUE(partial.Poll());
  EXPECT_EQ(partial.ok_count(), 1u) << Results(partial);
  EXPECT_EQ(partial.result(1).ToString(),
            "invalid_argument: save: copy from the engine: cuda copy engine: save of engine block "
            "5: fault hook: " +
                CudaText(cudaErrorInvalidValue));
  std::vector<BlockKey> chain = keys;
  chain.insert(chain.end(), more.begin(), more.end());
  auto hit = (*rt)->Lookup(ns, chain);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_blocks, 5u);
  (*rt)->Shutdown();
}

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (KvLayoutKind kind : kAllKvLayoutKinds) {
    for (CudaCopyPath path : {CudaCopyPath::kDma, CudaCopyPath::kKernel})
      out.push_back({kind, path});
  }
  return out;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(KvLayoutKindName(info.param.kind)) +
         (info.param.path == CudaCopyPath::kDma ? "_dma" : "_kernel");
}

INSTANTIATE_TEST_SUITE_P(AllLayoutsAndPaths, CudaCopyEngineFaultTest,
                         ::testing::ValuesIn(AllCases()), CaseName);

// The copy kernel's descriptor table is pinned memory that may not be had:
// the batch then goes by DMA (said once, as a warning), it does not fail.
TEST(CudaCopyEngineTableTest, WithoutADescriptorTableTheKernelPathCopiesByDma) {
  SKIP_WITHOUT_DEVICE();
  class Lines final : public LogSink {
   public:
    void Log(LogLevel level, std::string_view message) override {
      std::lock_guard lock(mu);
      if (level == LogLevel::kWarning) warnings.emplace_back(message);
    }
    std::mutex mu;
    std::vector<std::string> warnings;
  };
  KvLayout layout = testing::SmallLayout(KvLayoutKind::kVllmNhd);
  layout.num_blocks = 16;
  auto ref = HostCopyEngine::Create(layout);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  testing::FillRandom(**ref, 77);
  DeviceTensors device(**ref);
  CudaCopyEngineOptions o;
  o.layout = layout;
  o.tensors = device.ptrs();
  o.path = CudaCopyPath::kKernel;
  auto log = std::make_shared<Lines>();
  std::atomic<int> asked{0};
  auto engine = cuda::TEST_CreateCudaCopyEngine(
      o, nullptr, log, [&](size_t bytes) -> Result<std::unique_ptr<cuda::PinnedPool::Buffer>> {
        asked.fetch_add(1);
        return Status::ResourceExhausted("no pinned memory for " + std::to_string(bytes));
      });
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<cuda::PinnedBuffer> host;
  for (int i = 0; i < 2; ++i) {
    auto b = cuda::PinnedBuffer::Allocate(layout.BlockBytes());
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    host.push_back(std::move(b).value());
  }
  const std::vector<BlockCopy> save = {{1, host[0].span()}, {4, host[1].span()}};
  EXPECT_EQ(testing::GatherAndWait(**engine, save).ToString(), "ok | ok");
  std::vector<std::byte> want(layout.BlockBytes());
  ASSERT_TRUE((*ref)->ReadBlock(1, want).ok());
  EXPECT_TRUE(Equal(host[0], want));
  ASSERT_TRUE((*ref)->ReadBlock(4, want).ok());
  EXPECT_TRUE(Equal(host[1], want));
  const std::vector<BlockCopy> load = {{9, host[0].span()}};
  EXPECT_EQ(testing::ScatterAndWait(**engine, load, nullptr).ToString(), "ok");
  device.DownloadInto(**ref);
  ASSERT_TRUE((*ref)->ReadBlock(9, want).ok());
  EXPECT_TRUE(Equal(host[0], want));
  EXPECT_GE(asked.load(), 2) << "the kernel path was not tried";
  engine->reset();  // drains before the tensors go
  std::lock_guard lock(log->mu);
  ASSERT_EQ(log->warnings.size(), 1u);
  EXPECT_NE(log->warnings[0].find("no pinned descriptor table for the copy kernel"),
            std::string::npos)
      << log->warnings[0];
}

}  // namespace
}  // namespace kvtier
