// The CUDA copy engine when code around a copy throws or changes devices: a
// throwing on_layer fails the copies it concerned (as on the host stand-in)
// and `done` still runs once; an exception while issuing abandons the batch
// only after the copies already queued have ended; the engine leaves the
// caller's current device (or context, or lack of one) as it found it; and a
// compute stream of another device is refused at creation. Every test skips
// without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda/cuda_copy_engine.h"
#include "gpu/cuda/cuda_util.h"
#include "kvtier/copy_engine.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/layout_test_util.h"

namespace kvtier {
namespace {

// Tests that change the main thread's device give device 0 back, which the
// fixtures of later tests allocate on.
struct BackToDeviceZero {
  ~BackToDeviceZero() { cudaSetDevice(0); }
};

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
  BackToDeviceZero back;
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

// The runtime's worker threads never choose a device. A copy made on one
// must leave it without a context: restoring "device 0" there would create
// GPU 0's context in a process serving another GPU.
TEST(CudaCopyEngineDeviceTest, AThreadWithoutAContextIsLeftWithoutOne) {
  SKIP_WITHOUT_DEVICE();
  BackToDeviceZero back;
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  const int last = count - 1;
  CUcontext probe = nullptr;
  ASSERT_TRUE(cuda::DriverContextOps().get(&probe)) << "cuCtxGetCurrent is not reachable";
  KvLayout layout = testing::SmallLayout(KvLayoutKind::kVllmNhd);
  layout.num_blocks = 8;
  auto ref = HostCopyEngine::Create(layout);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  testing::FillRandom(**ref, 41);
  ASSERT_EQ(cudaSetDevice(last), cudaSuccess);
  auto tensors = std::make_unique<testing::DeviceTensors>(**ref);  // on the last device
  CudaCopyEngineOptions o;
  o.layout = layout;
  o.tensors = tensors->ptrs();
  o.device = last;
  auto engine = CreateCudaCopyEngine(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto pinned = cuda::PinnedBuffer::Allocate(layout.BlockBytes());
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  std::vector<std::byte> pageable(layout.BlockBytes());

  CUcontext before = cuda::CurrentContext(), after = before;  // overwritten by the thread
  std::vector<std::string> results;
  std::thread worker([&] {
    before = cuda::CurrentContext();
    const std::vector<BlockCopy> save = {{2, pinned->span()}};
    const std::vector<BlockCopy> load = {{5, pinned->span()}};
    const std::vector<BlockCopy> slow = {{3, pageable}};
    results.push_back(testing::GatherAndWait(**engine, save).ToString());
    results.push_back(testing::ScatterAndWait(**engine, load, nullptr).ToString());
    results.push_back(testing::GatherAndWait(**engine, slow).ToString());
    after = cuda::CurrentContext();
  });
  worker.join();
  EXPECT_EQ(before, nullptr) << "a new thread already had a context";
  EXPECT_EQ(results, (std::vector<std::string>{"ok", "ok", "ok"}));
  EXPECT_EQ(after, nullptr) << "the copies left a context current on the caller's thread";
  // The bytes moved: block 5 now holds block 2's bytes.
  tensors->DownloadInto(**ref);
  std::vector<std::byte> b2(layout.BlockBytes()), b5(layout.BlockBytes());
  ASSERT_TRUE((*ref)->ReadBlock(2, b2).ok());
  ASSERT_TRUE((*ref)->ReadBlock(5, b5).ok());
  EXPECT_EQ(b2, b5);
  engine->reset();
  tensors.reset();
}

// A compute stream must be on the engine's device: one of another device
// would make every copy fail later, so creation refuses it.
TEST(CudaCopyEngineDeviceTest, AComputeStreamOfAnotherDeviceIsRefused) {
  SKIP_WITHOUT_DEVICE();
  BackToDeviceZero back;
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  KvLayout layout = testing::SmallLayout(KvLayoutKind::kVllmNhd);
  auto ref = HostCopyEngine::Create(layout);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const int engine_device = count - 1;
  ASSERT_EQ(cudaSetDevice(engine_device), cudaSuccess);
  auto tensors = std::make_unique<testing::DeviceTensors>(**ref);
  cudaStream_t own = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), cudaSuccess);
  CudaCopyEngineOptions o;
  o.layout = layout;
  o.tensors = tensors->ptrs();
  o.device = engine_device;
  o.compute_stream = own;
  {
    auto engine = CreateCudaCopyEngine(o);  // its own device's stream: accepted
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  }
  if (count >= 2) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t other = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    o.compute_stream = other;
    auto engine = CreateCudaCopyEngine(o);
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(engine.status().message(),
              "cuda copy engine: compute_stream belongs to device 0, not to the engine's device " +
                  std::to_string(engine_device) +
                  "; pass the stream the engine computes on, on options.device");
    EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamDestroy(own), cudaSuccess);
  tensors.reset();
  if (count < 2) GTEST_SKIP() << "a stream of another device needs two devices, one present";
}

}  // namespace
}  // namespace kvtier
