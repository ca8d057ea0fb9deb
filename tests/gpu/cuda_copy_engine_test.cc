// The CUDA copy engine against the host stand-in: for every layout and both
// paths, random engine contents are gathered and scattered by both engines
// and compared byte for byte; layer events fire in order and only after
// their layer landed. Without a device every test but the "no device" one
// skips with the CUDA error text.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda/cuda_util.h"
#include "kvtier/copy_engine.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/layout_test_util.h"

namespace kvtier {
namespace {

using testing::DeviceTensors;
using testing::FillRandom;

TEST(CudaCopyEngineNoDeviceTest, CreateFailsWithTheCudaErrorText) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaSuccess && n > 0) GTEST_SKIP() << "a device is present";
  CudaCopyEngineOptions o;
  o.layout = testing::SmallLayout(KvLayoutKind::kVllmNhd);
  o.tensors.assign(3, reinterpret_cast<void*>(0x1000));
  Result<std::unique_ptr<CopyEngine>> engine = CreateCudaCopyEngine(o);
  ASSERT_FALSE(engine.ok());
  if (err == cudaSuccess) {
    EXPECT_EQ(engine.status().ToString(),
              "not_supported: cuda copy engine: device 0 requested but 0 present");
  } else {
    EXPECT_EQ(engine.status().ToString(),
              std::string("not_supported: cuda copy engine: cudaGetDeviceCount: ") +
                  cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
  }
  // The RAII owners report the same error instead of crashing.
  Result<cuda::PinnedBuffer> pinned = cuda::PinnedBuffer::Allocate(4096);
  EXPECT_FALSE(pinned.ok());
  EXPECT_NE(pinned.status().ToString().find("cudaHostAlloc of 4096 bytes: "), std::string::npos)
      << pinned.status().ToString();
}

TEST(CudaCopyEngineOptionsTest, ValidateMessages) {
  CudaCopyEngineOptions o;
  o.layout = testing::SmallLayout(KvLayoutKind::kCrossLayer);
  o.tensors.assign(3, reinterpret_cast<void*>(0x1000));
  EXPECT_EQ(o.Validate().ToString(),
            "invalid_argument: cuda copy engine: layout cross_layer has 1 engine tensors; got 3 "
            "tensor pointers");
  o.tensors = {nullptr};
  EXPECT_EQ(o.Validate().ToString(), "invalid_argument: cuda copy engine: tensor 0 is null");
  o.tensors = {reinterpret_cast<void*>(0x1000)};
  o.compute_stream = cudaStreamPerThread;
  EXPECT_EQ(o.Validate().ToString(),
            "invalid_argument: cuda copy engine: compute_stream is cudaStreamPerThread, which "
            "names the stream of whichever thread uses it; pass the engine's stream itself");
  o.compute_stream = nullptr;
  o.layout.head_size = 0;
  EXPECT_EQ(CreateCudaCopyEngine(o).status().ToString(),
            "invalid_argument: cuda copy engine: kv layout: head_size is 0");
}

TEST(CudaUtilTest, FromCudaMapsCodesAndKeepsTheText) {
  EXPECT_TRUE(cuda::FromCuda(cudaSuccess, "x").ok());
  EXPECT_EQ(cuda::FromCuda(cudaErrorInsufficientDriver, "probe").ToString(),
            std::string("not_supported: probe: cudaErrorInsufficientDriver: ") +
                cudaGetErrorString(cudaErrorInsufficientDriver));
  EXPECT_EQ(cuda::FromCuda(cudaErrorMemoryAllocation, "m").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(cuda::FromCuda(cudaErrorInvalidValue, "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::FromCuda(cudaErrorIllegalAddress, "c").code(), StatusCode::kIOError);
}

TEST(CudaUtilTest, StickyErrorsAndDeviceHealth) {
  EXPECT_TRUE(cuda::IsStickyError(cudaErrorIllegalAddress));
  EXPECT_TRUE(cuda::IsStickyError(cudaErrorLaunchFailure));
  EXPECT_TRUE(cuda::IsStickyError(cudaErrorECCUncorrectable));
  EXPECT_FALSE(cuda::IsStickyError(cudaSuccess));
  EXPECT_FALSE(cuda::IsStickyError(cudaErrorInvalidValue));
  EXPECT_FALSE(cuda::IsStickyError(cudaErrorMemoryAllocation));
  EXPECT_FALSE(cuda::IsStickyError(cudaErrorNotReady));
  cuda::DeviceHealth health;
  EXPECT_TRUE(health.Lost().ok());
  health.MarkLost(Status::IOError("first"));
  health.MarkLost(Status::IOError("second"));
  EXPECT_EQ(health.Lost().ToString(), "io_error: first");
}

// ---- with a device -----------------------------------------------------------

struct Case {
  KvLayoutKind kind;
  CudaCopyPath path;
  bool odd_rows;  // 6-byte rows (byte loop of the kernel) instead of 128-byte ones
};

KvLayout CaseLayout(const Case& c) {
  KvLayout l = testing::SmallLayout(c.kind);
  if (!c.odd_rows) {
    l.num_blocks = 8;
    l.block_tokens = 16;
    l.head_size = c.kind == KvLayoutKind::kMla ? 576 : 64;
  }
  return l;
}

class CudaCopyEngineTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    layout_ = CaseLayout(GetParam());
    auto ref = HostCopyEngine::Create(layout_);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ref_ = std::move(ref).value();
    FillRandom(*ref_, 17);
    device_ = std::make_unique<DeviceTensors>(*ref_);
    ASSERT_EQ(cudaStreamCreate(&compute_), cudaSuccess);
    CudaCopyEngineOptions o;
    o.layout = layout_;
    o.tensors = device_->ptrs();
    o.compute_stream = compute_;
    o.path = GetParam().path;
    auto engine = CreateCudaCopyEngine(o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }
  void TearDown() override {
    engine_.reset();  // drains before the tensors go
    device_.reset();
    if (compute_ != nullptr) cudaStreamDestroy(compute_);
  }

  // A pinned host block per engine block id.
  std::vector<cuda::PinnedBuffer> Pinned(size_t n) {
    std::vector<cuda::PinnedBuffer> out;
    for (size_t i = 0; i < n; ++i) {
      auto b = cuda::PinnedBuffer::Allocate(layout_.BlockBytes());
      EXPECT_TRUE(b.ok()) << b.status().ToString();
      if (b.ok()) out.push_back(std::move(b).value());
    }
    return out;
  }

  KvLayout layout_;
  std::unique_ptr<HostCopyEngine> ref_;
  std::unique_ptr<DeviceTensors> device_;
  cudaStream_t compute_ = nullptr;
  std::unique_ptr<CopyEngine> engine_;
};

TEST_P(CudaCopyEngineTest, GatherMatchesTheStandIn) {
  const std::vector<uint32_t> blocks = {3, 0, layout_.num_blocks - 1, 3};
  std::vector<cuda::PinnedBuffer> host = Pinned(blocks.size());
  ASSERT_EQ(host.size(), blocks.size());
  std::vector<BlockCopy> copies;
  for (size_t i = 0; i < blocks.size(); ++i) copies.push_back({blocks[i], host[i].span()});
  const testing::CopyResults r = testing::GatherAndWait(*engine_, copies);
  ASSERT_TRUE(r.ok()) << r.ToString();
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::vector<std::byte> want(layout_.BlockBytes());
    ASSERT_TRUE(ref_->ReadBlock(blocks[i], want).ok());
    EXPECT_EQ(std::memcmp(host[i].data(), want.data(), want.size()), 0) << "block " << blocks[i];
  }
}

// Loads into block ids other than the ones saved from; the whole device
// cache must then equal the stand-in's after the same scatter.
TEST_P(CudaCopyEngineTest, ScatterMatchesTheStandInAndLayersFireInOrder) {
  std::vector<cuda::PinnedBuffer> host = Pinned(2);
  ASSERT_EQ(host.size(), 2u);
  for (size_t i = 0; i < host.size(); ++i) {
    std::vector<std::byte> r = testing::RandomBlock(layout_, 100 + i);
    std::memcpy(host[i].data(), r.data(), r.size());
  }
  const std::vector<BlockCopy> copies = {{1, host[0].span()},
                                         {layout_.num_blocks - 2, host[1].span()}};
  ASSERT_TRUE(ref_->WriteBlock(copies[0].engine_block, copies[0].host).ok());
  ASSERT_TRUE(ref_->WriteBlock(copies[1].engine_block, copies[1].host).ok());
  const bool per_layer = EngineTensorCount(layout_) == layout_.num_layers;
  std::vector<std::string> events;  // written by the completion thread only
  const testing::CopyResults r = testing::ScatterAndWait(*engine_, copies, [&](uint32_t layer) {
    events.push_back("layer " + std::to_string(layer));
    if (per_layer) {  // layer `layer` has fully landed
      std::vector<std::byte> got = device_->Download(layer);
      std::span<std::byte> want = ref_->Tensor(layer);
      events.back() += std::memcmp(got.data(), want.data(), want.size()) == 0 ? "" : " wrong";
    }
  });
  ASSERT_TRUE(r.ok()) << r.ToString();
  std::vector<std::string> expected;
  for (uint32_t l = 0; l < layout_.num_layers; ++l)
    expected.push_back("layer " + std::to_string(l));
  EXPECT_EQ(events, expected);
  for (uint32_t t = 0; t < EngineTensorCount(layout_); ++t) {
    std::vector<std::byte> got = device_->Download(t);
    EXPECT_EQ(std::memcmp(got.data(), ref_->Tensor(t).data(), got.size()), 0) << "tensor " << t;
  }
}

// Pageable buffers cannot be mapped: the engine falls back to DMA.
TEST_P(CudaCopyEngineTest, PageableHostBuffersRoundTrip) {
  std::vector<std::byte> in = testing::RandomBlock(layout_, 7), out(layout_.BlockBytes());
  ASSERT_TRUE(testing::ScatterAndWait(*engine_, std::vector<BlockCopy>{{2, in}}, nullptr).ok());
  ASSERT_TRUE(testing::GatherAndWait(*engine_, std::vector<BlockCopy>{{2, out}}).ok());
  EXPECT_EQ(out, in);
}

// A save issued right after the engine queued a write of the block on its
// compute stream sees the written bytes: the copy stream waits for it.
TEST_P(CudaCopyEngineTest, GatherIsOrderedAfterTheComputeStream) {
  std::vector<cuda::PinnedBuffer> src = Pinned(1), dst = Pinned(1);
  ASSERT_EQ(src.size() + dst.size(), 2u);
  std::vector<std::byte> fresh = testing::RandomBlock(layout_, 55);
  ASSERT_TRUE(ref_->WriteBlock(4, fresh).ok());
  // Write the block's new contents tensor by tensor, as the engine would.
  for (uint32_t t = 0; t < EngineTensorCount(layout_); ++t) {
    ASSERT_EQ(cudaMemcpyAsync(device_->ptrs()[t], ref_->Tensor(t).data(), ref_->Tensor(t).size(),
                              cudaMemcpyHostToDevice, compute_),
              cudaSuccess);
  }
  ASSERT_TRUE(testing::GatherAndWait(*engine_, std::vector<BlockCopy>{{4, dst[0].span()}}).ok());
  EXPECT_EQ(std::memcmp(dst[0].data(), fresh.data(), fresh.size()), 0);
}

// The arena path: memory from mmap, registered through PinHostMemory.
TEST_P(CudaCopyEngineTest, RegisteredHostMemoryIsUsable) {
  const size_t bytes = (layout_.BlockBytes() + 4095) / 4096 * 4096;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  std::span<std::byte> region(static_cast<std::byte*>(m), bytes);
  {
    auto pin = engine_->PinHostMemory(region);
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    ASSERT_NE(pin->get(), nullptr);
    EXPECT_NE(cuda::MappedDevicePointer(region.data()), nullptr);
    ASSERT_TRUE(testing::GatherAndWait(
                    *engine_, std::vector<BlockCopy>{{1, region.first(layout_.BlockBytes())}})
                    .ok());
    std::vector<std::byte> want(layout_.BlockBytes());
    ASSERT_TRUE(ref_->ReadBlock(1, want).ok());
    EXPECT_EQ(std::memcmp(region.data(), want.data(), want.size()), 0);
  }
  EXPECT_EQ(cuda::MappedDevicePointer(region.data()), nullptr);  // unregistered
  munmap(m, bytes);
}

// A buffer that starts in a registered range and runs past its end is not
// taken as mapped: a kernel would read unmapped device addresses beyond the
// registration, an illegal-address fault that ends the CUDA context. The copy
// takes the unmapped path and lands whole.
TEST_P(CudaCopyEngineTest, ABufferRunningPastItsRegistrationIsNotTakenAsMapped) {
  const size_t block = layout_.BlockBytes();
  const size_t registered = (block + 4095) / 4096 * 4096;
  const size_t bytes = 2 * registered;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  std::span<std::byte> all(static_cast<std::byte*>(m), bytes);
  {
    auto pin = engine_->PinHostMemory(all.first(registered));
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    EXPECT_EQ(cuda::MappedDeviceRange(all.data(), block), cuda::MappedDevicePointer(all.data()));
    EXPECT_NE(cuda::MappedDeviceRange(all.data(), block), nullptr);
    const std::span<std::byte> straddling = all.subspan(registered - 64, block);
    EXPECT_NE(cuda::MappedDevicePointer(straddling.data()), nullptr);
    EXPECT_EQ(cuda::MappedDeviceRange(straddling.data(), straddling.size()), nullptr);
    ASSERT_TRUE(testing::GatherAndWait(*engine_, std::vector<BlockCopy>{{1, straddling}}).ok());
    std::vector<std::byte> want(block);
    ASSERT_TRUE(ref_->ReadBlock(1, want).ok());
    EXPECT_EQ(std::memcmp(straddling.data(), want.data(), want.size()), 0);
  }
  munmap(m, bytes);
}

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (KvLayoutKind kind : kAllKvLayoutKinds) {
    for (CudaCopyPath path : {CudaCopyPath::kDma, CudaCopyPath::kKernel}) {
      for (bool odd : {false, true}) out.push_back({kind, path, odd});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllLayoutsAndPaths, CudaCopyEngineTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(KvLayoutKindName(info.param.kind)) +
                                  (info.param.path == CudaCopyPath::kDma ? "_dma" : "_kernel") +
                                  (info.param.odd_rows ? "_odd" : "");
                         });

}  // namespace
}  // namespace kvtier
