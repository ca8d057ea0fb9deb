// The CUDA copy engine when code around a copy throws or changes devices: a
// throwing on_layer fails the copies it concerned (as on the host stand-in)
// and `done` still runs once; an exception while issuing abandons the batch
// only after the copies already queued have ended; and the engine leaves the
// caller's current device as it found it. Every test skips without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/cuda/cuda_copy_engine.h"
#include "gpu/cuda/cuda_util.h"
#include "kvtier/copy_engine.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/layout_test_util.h"

namespace kvtier {
namespace {

class CudaCopyEngineCallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    layout_ = testing::SmallLayout(KvLayoutKind::kVllmNhd);  // 3 layers
    layout_.num_blocks = 16;
    auto ref = HostCopyEngine::Create(layout_);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ref_ = std::move(ref).value();
    testing::FillRandom(*ref_, 31);
    device_ = std::make_unique<testing::DeviceTensors>(*ref_);
    CudaCopyEngineOptions o;
    o.layout = layout_;
    o.tensors = device_->ptrs();
    auto engine = cuda::TEST_CreateCudaCopyEngine(o, [this](uint32_t, uint32_t layer) {
      if (throw_at_layer_.load() == layer) throw std::bad_alloc();
      return cudaSuccess;
    });
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }
  void TearDown() override {
    engine_.reset();  // drains before the tensors go
    device_.reset();
  }
  // Two pinned host blocks holding new bytes, and their copies into blocks 8, 9.
  std::vector<BlockCopy> TwoLoads() {
    for (int i = 0; i < 2; ++i) {
      auto b = cuda::PinnedBuffer::Allocate(layout_.BlockBytes());
      EXPECT_TRUE(b.ok()) << b.status().ToString();
      if (!b.ok()) return {};
      std::vector<std::byte> r = testing::RandomBlock(layout_, 60 + i);
      std::memcpy(b->data(), r.data(), r.size());
      host_.push_back(std::move(b).value());
    }
    return {{8, host_[0].span()}, {9, host_[1].span()}};
  }

  KvLayout layout_;
  std::unique_ptr<HostCopyEngine> ref_;
  std::unique_ptr<testing::DeviceTensors> device_;
  std::unique_ptr<CopyEngine> engine_;
  std::vector<cuda::PinnedBuffer> host_;
  std::atomic<uint32_t> throw_at_layer_{~0u};
};

TEST_F(CudaCopyEngineCallbackTest, AThrowingOnLayerFailsTheCopiesAndNoLaterLayerIsReported) {
  const std::vector<BlockCopy> copies = TwoLoads();
  ASSERT_EQ(copies.size(), 2u);
  std::vector<uint32_t> layers;  // written by the completion thread only
  const testing::CopyResults r = testing::ScatterAndWait(*engine_, copies, [&](uint32_t l) {
    layers.push_back(l);
    if (l == 1) throw std::runtime_error("boom");
  });
  EXPECT_EQ(r.ToString(),
            "internal: cuda copy engine: load of engine block 8 layer 1: on_layer(1) threw: boom | "
            "internal: cuda copy engine: load of engine block 9 layer 1: on_layer(1) threw: boom");
  EXPECT_EQ(layers, (std::vector<uint32_t>{0, 1}));
  // The completion thread survived: the next copy lands and reports.
  EXPECT_TRUE(testing::ScatterAndWait(*engine_, copies, nullptr).ok());
}

TEST_F(CudaCopyEngineCallbackTest, AThrowWhileIssuingFailsTheBatchAfterItsQueuedCopiesEnd) {
  const std::vector<BlockCopy> copies = TwoLoads();
  ASSERT_EQ(copies.size(), 2u);
  throw_at_layer_ = 1;  // layer 0 is queued by then
  const testing::CopyResults r = testing::ScatterAndWait(*engine_, copies, nullptr);
  ASSERT_EQ(r.each.size(), 2u);
  for (const Status& st : r.each) {
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
    EXPECT_NE(st.ToString().find("out of memory while issuing copies"), std::string::npos);
  }
  // `done` ran after the stream drained: nothing is in flight any more, and
  // the engine serves the next call.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  throw_at_layer_ = ~0u;
  EXPECT_TRUE(testing::ScatterAndWait(*engine_, copies, nullptr).ok());
}

TEST(CudaCopyEngineDeviceTest, CreatingAndPinningLeaveTheCallersDevice) {
  SKIP_WITHOUT_DEVICE();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "needs two devices, " << count << " present";
  KvLayout layout = testing::SmallLayout(KvLayoutKind::kVllmNhd);
  auto ref = HostCopyEngine::Create(layout);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto tensors = std::make_unique<testing::DeviceTensors>(**ref);  // on device 0
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  CudaCopyEngineOptions o;
  o.layout = layout;
  o.tensors = tensors->ptrs();
  o.device = 0;
  auto engine = CreateCudaCopyEngine(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 1) << "creating the engine changed the caller's device";
  std::vector<std::byte> memory(1 << 16);
  auto pin = (*engine)->PinHostMemory(memory);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 1) << "pinning changed the caller's device";
  pin->reset();
  engine->reset();
  tensors.reset();
}

}  // namespace
}  // namespace kvtier
