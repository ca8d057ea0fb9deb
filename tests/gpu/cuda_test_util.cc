#include "tests/gpu/cuda_test_util.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <random>

namespace kvtier::testing {

std::string NoDeviceReason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    return std::string("no usable CUDA device: cudaGetDeviceCount: ") + cudaGetErrorName(err) +
           ": " + cudaGetErrorString(err);
  }
  return n == 0 ? "no CUDA device" : "";
}

void FillRandom(HostCopyEngine& engine, uint32_t seed) {
  std::mt19937 rng(seed);
  for (uint32_t t = 0; t < EngineTensorCount(engine.layout()); ++t) {
    for (std::byte& b : engine.Tensor(t)) b = static_cast<std::byte>(rng() & 0xff);
  }
}

DeviceTensors::DeviceTensors(HostCopyEngine& ref) : ref_(ref) {
  for (uint32_t t = 0; t < EngineTensorCount(ref.layout()); ++t) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, ref.Tensor(t).size()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, ref.Tensor(t).data(), ref.Tensor(t).size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    ptrs_.push_back(p);
  }
}

DeviceTensors::~DeviceTensors() {
  for (void* p : ptrs_) cudaFree(p);
}

std::vector<std::byte> DeviceTensors::Download(uint32_t t) const {
  std::vector<std::byte> out(ref_.Tensor(t).size());
  EXPECT_EQ(cudaMemcpy(out.data(), ptrs_[t], out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

void DeviceTensors::Upload() const {
  for (uint32_t t = 0; t < ptrs_.size(); ++t) {
    EXPECT_EQ(
        cudaMemcpy(ptrs_[t], ref_.Tensor(t).data(), ref_.Tensor(t).size(), cudaMemcpyHostToDevice),
        cudaSuccess);
  }
}

void DeviceTensors::DownloadInto(HostCopyEngine& engine) const {
  for (uint32_t t = 0; t < ptrs_.size(); ++t) {
    std::vector<std::byte> bytes = Download(t);
    std::memcpy(engine.Tensor(t).data(), bytes.data(), bytes.size());
  }
}

}  // namespace kvtier::testing
