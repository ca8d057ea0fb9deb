// What the CUDA copy engine checks when it is created, and what it logs. The
// decisions (the copy path when the kernel has no image for the device, the
// size each tensor's allocation must have) are plain functions tested here
// without a device; the cases on a device skip without one.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda/copy_kernel.h"
#include "gpu/cuda/cuda_copy_engine.h"
#include "gpu/cuda/engine_checks.h"
#include "kvtier/copy_engine.h"
#include "kvtier/env.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/layout_test_util.h"

namespace kvtier::cuda {
namespace {

class RecordingLog final : public LogSink {
 public:
  void Log(LogLevel level, std::string_view message) override {
    std::lock_guard lock(mu_);
    lines_.push_back({level, std::string(message)});
  }
  std::vector<std::pair<LogLevel, std::string>> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
};

TEST(ChooseCopyPathTest, WithoutAKernelImageAutoFallsBackToDmaAndSaysSo) {
  RecordingLog log;
  for (cudaError_t err : {cudaErrorNoKernelImageForDevice, cudaErrorInvalidDeviceFunction}) {
    Result<CudaCopyPath> path = ChooseCopyPath(CudaCopyPath::kAuto, err, "device 0 (sm_75)", log);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    EXPECT_EQ(*path, CudaCopyPath::kDma);
  }
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].first, LogLevel::kWarning);
  EXPECT_EQ(lines[0].second,
            "cuda copy engine: the copy kernel has no image for device 0 (sm_75) (this build's "
            "CMAKE_CUDA_ARCHITECTURES leave it out): cudaErrorNoKernelImageForDevice; every batch "
            "is copied by DMA instead");
}

TEST(ChooseCopyPathTest, WithoutAKernelImageTheKernelPathIsNotSupported) {
  RecordingLog log;
  Result<CudaCopyPath> path =
      ChooseCopyPath(CudaCopyPath::kKernel, cudaErrorNoKernelImageForDevice, "device 1", log);
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().ToString(),
            "not_supported: cuda copy engine: the copy kernel has no image for device 1 (this "
            "build's CMAKE_CUDA_ARCHITECTURES leave it out): cudaErrorNoKernelImageForDevice; "
            "rebuild for the device or choose the DMA path");
  EXPECT_TRUE(log.lines().empty());
}

TEST(ChooseCopyPathTest, AKernelThatLoadsKeepsThePathAskedFor) {
  RecordingLog log;
  EXPECT_EQ(*ChooseCopyPath(CudaCopyPath::kAuto, cudaSuccess, "device 0", log),
            CudaCopyPath::kAuto);
  EXPECT_EQ(*ChooseCopyPath(CudaCopyPath::kKernel, cudaSuccess, "device 0", log),
            CudaCopyPath::kKernel);
  EXPECT_EQ(*ChooseCopyPath(CudaCopyPath::kDma, cudaErrorNoKernelImageForDevice, "device 0", log),
            CudaCopyPath::kDma);
  EXPECT_FALSE(ChooseCopyPath(CudaCopyPath::kAuto, cudaErrorIllegalAddress, "device 0", log).ok());
  EXPECT_TRUE(log.lines().empty());
}

// Allocations as [base, base + size) ranges, for CheckTensorRange: virtual
// memory mappings, or (`mapped` false) separate allocations.
AddressRange Ranges(std::vector<std::pair<uint64_t, uint64_t>> ranges, bool mapped = true) {
  return [ranges, mapped](uint64_t addr, uint64_t* base, uint64_t* size, bool* is_mapping) {
    for (const auto& [b, n] : ranges) {
      if (addr >= b && addr < b + n) {
        *base = b;
        *size = n;
        *is_mapping = mapped;
        return true;
      }
    }
    return false;
  };
}

TEST(CheckTensorRangeTest, TheAllocationMustHoldTheTensorFromThePointer) {
  const AddressRange one = Ranges({{0x1000, 4096}});
  EXPECT_TRUE(CheckTensorRange(0, 0x1000, 4096, one).ok());
  EXPECT_TRUE(CheckTensorRange(0, 0x1800, 2048, one).ok());
  EXPECT_EQ(CheckTensorRange(2, 0x1000, 4097, one).ToString(),
            "invalid_argument: cuda copy engine: tensor 2 at 0x1000: 4096 bytes mapped from the "
            "pointer; the layout needs 4097 (EngineTensorBytes)");
  EXPECT_EQ(CheckTensorRange(1, 0x1800, 4096, one).ToString(),
            "invalid_argument: cuda copy engine: tensor 1 at 0x1800: 2048 bytes mapped from the "
            "pointer; the layout needs 4096 (EngineTensorBytes)");
  EXPECT_EQ(CheckTensorRange(0, 0x9000, 1, one).ToString(),
            "invalid_argument: cuda copy engine: tensor 0 at 0x9000: 0 bytes mapped from the "
            "pointer; the layout needs 1 (EngineTensorBytes)");
}

// A tensor of a virtual memory allocator spans ranges mapped back to back;
// a gap ends it.
TEST(CheckTensorRangeTest, RangesMappedBackToBackCount) {
  const AddressRange chunks = Ranges({{0x1000, 0x1000}, {0x2000, 0x1000}, {0x4000, 0x1000}});
  EXPECT_TRUE(CheckTensorRange(0, 0x1800, 0x1800, chunks).ok());
  EXPECT_EQ(CheckTensorRange(0, 0x1800, 0x1801, chunks).ToString(),
            "invalid_argument: cuda copy engine: tensor 0 at 0x1800: 6144 bytes mapped from the "
            "pointer; the layout needs 6145 (EngineTensorBytes)");
}

// Separate allocations that merely lie back to back (cudaMalloc'd layer
// tensors) are not one tensor: one too small for the layout is refused, or
// its last block would be copied into the next allocation.
TEST(CheckTensorRangeTest, SeparateAllocationsBackToBackDoNotCount) {
  const AddressRange apart = Ranges({{0x1000, 0x1000}, {0x2000, 0x1000}}, /*mapped=*/false);
  EXPECT_TRUE(CheckTensorRange(0, 0x1800, 0x800, apart).ok());
  EXPECT_EQ(CheckTensorRange(0, 0x1800, 0x1000, apart).ToString(),
            "invalid_argument: cuda copy engine: tensor 0 at 0x1800: 2048 bytes mapped from the "
            "pointer; the layout needs 4096 (EngineTensorBytes)");
  // A mapping followed by an allocation of its own: that one is not summed.
  const AddressRange mixed = [](uint64_t addr, uint64_t* base, uint64_t* size, bool* mapped) {
    if (addr < 0x1000 || addr >= 0x3000) return false;
    *base = addr < 0x2000 ? 0x1000 : 0x2000;
    *size = 0x1000;
    *mapped = addr < 0x2000;
    return true;
  };
  EXPECT_FALSE(CheckTensorRange(0, 0x1800, 0x1000, mixed).ok());
}

// ---- on a device --------------------------------------------------------------

class CudaEngineCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    layout_ = testing::SmallLayout(KvLayoutKind::kVllmNhd);
    for (uint32_t t = 0; t < EngineTensorCount(layout_); ++t) {
      void* p = nullptr;
      ASSERT_EQ(cudaMalloc(&p, EngineTensorBytes(layout_)), cudaSuccess);
      tensors_.push_back(p);
    }
  }
  void TearDown() override {
    for (void* p : tensors_) cudaFree(p);
  }
  CudaCopyEngineOptions Options() const {
    CudaCopyEngineOptions o;
    o.layout = layout_;
    o.tensors = tensors_;
    return o;
  }

  KvLayout layout_;
  std::vector<void*> tensors_;
};

TEST_F(CudaEngineCreateTest, ATensorSmallerThanTheLayoutIsRefused) {
  void* small = nullptr;
  ASSERT_EQ(cudaMalloc(&small, EngineTensorBytes(layout_) - 1), cudaSuccess);
  CudaCopyEngineOptions o = Options();
  o.tensors[1] = small;
  Result<std::unique_ptr<CopyEngine>> engine = CreateCudaCopyEngine(o);
  cudaFree(small);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("tensor 1 at 0x"), std::string::npos)
      << engine.status().ToString();
  EXPECT_NE(engine.status().message().find("; the layout needs " +
                                           std::to_string(EngineTensorBytes(layout_))),
            std::string::npos)
      << engine.status().ToString();

  // A pointer into the middle of a large enough allocation, too near its end.
  o = Options();
  o.tensors[0] = static_cast<std::byte*>(tensors_[0]) + 256;
  engine = CreateCudaCopyEngine(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("tensor 0 at 0x"), std::string::npos)
      << engine.status().ToString();
  EXPECT_TRUE(CreateCudaCopyEngine(Options()).ok());
}

// The build has an image for the test device: the kernel path stays, and
// nothing is logged.
TEST_F(CudaEngineCreateTest, TheKernelPathIsKeptWhereTheKernelLoads) {
  ASSERT_EQ(ProbeCopyKernel(), cudaSuccess);
  auto log = std::make_shared<RecordingLog>();
  CudaCopyEngineOptions o = Options();
  o.path = CudaCopyPath::kKernel;
  EXPECT_TRUE(TEST_CreateCudaCopyEngine(o, nullptr, log).ok());
  EXPECT_TRUE(log->lines().empty());
}

// Pageable host buffers are copied slowly: said once, as an error.
TEST_F(CudaEngineCreateTest, UnregisteredHostMemoryIsLoggedOnce) {
  auto log = std::make_shared<RecordingLog>();
  auto engine = TEST_CreateCudaCopyEngine(Options(), nullptr, log);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<std::byte> a(layout_.BlockBytes()), b(layout_.BlockBytes());
  const std::vector<BlockCopy> copies = {{0, a}, {1, b}};
  EXPECT_TRUE(testing::GatherAndWait(**engine, copies).ok());
  EXPECT_TRUE(testing::ScatterAndWait(**engine, copies, nullptr).ok());
  const auto lines = log->lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].first, LogLevel::kError);
  EXPECT_NE(lines[0].second.find("host buffers are not registered with CUDA"), std::string::npos)
      << lines[0].second;
}

}  // namespace
}  // namespace kvtier::cuda
