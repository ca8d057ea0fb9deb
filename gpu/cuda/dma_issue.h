// Issuing contiguous pieces to the DMA engines, for the CUDA copy engine:
// one batched driver call where the driver has it and the host memory is
// page-locked, else one cudaMemcpyAsync per piece. Not for use outside
// gpu/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string>

#include "gpu/cuda/copy_kernel.h"
#include "gpu/cuda/cuda_util.h"

namespace kvtier::cuda {

// A failed CUDA call: its error and the call's name.
struct CallError {
  cudaError_t err = cudaSuccess;
  std::string call;
  bool ok() const { return err == cudaSuccess; }
  Status ToStatus() const { return FromCuda(err, call); }
};

// Enqueues `pieces` on `stream`; `pinned` when every host end is
// page-locked. The first failed call, or OK.
CallError IssueDma(std::span<const CopyPiece> pieces, bool pinned, cudaStream_t stream);

}  // namespace kvtier::cuda
