// The copy kernel: moves a table of (dst, src, bytes) pieces, one warp per
// piece. Used for layouts whose contiguous runs are too short for DMA
// descriptors to pay off (vLLM HND, packed); host pointers in the table are
// device addresses of mapped pinned memory, so the kernel reads or writes
// host memory directly over the bus.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvtier::cuda {

struct CopyPiece {
  uint64_t dst = 0;  // device address
  uint64_t src = 0;  // device address
  uint64_t bytes = 0;
};

// Launches the kernel on `stream` over `count` pieces read from `pieces`,
// which must be device-accessible (mapped pinned memory) and stay valid until
// the kernel completes. Returns the launch error, if any. Pieces of 0 bytes
// are skipped (the engine neutralises the pieces of failed blocks so).
cudaError_t LaunchCopyPieces(const CopyPiece* pieces, uint32_t count, cudaStream_t stream);

// cudaFuncGetAttributes of the kernel on the current device: fails with
// cudaErrorNoKernelImageForDevice (or cudaErrorInvalidDeviceFunction) when
// the build has no image the device can run. Leaves no error behind.
cudaError_t ProbeCopyKernel();

}  // namespace kvtier::cuda
