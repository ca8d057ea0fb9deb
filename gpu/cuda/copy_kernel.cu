#include <algorithm>

#include "gpu/cuda/copy_kernel.h"

namespace kvtier::cuda {
namespace {

constexpr uint32_t kWarpsPerBlock = 8;
constexpr uint32_t kMaxBlocks = 4096;

// Copies `bytes` with the widest accesses the alignment of both ends allows.
// Rows of real models (head_size * elem_bytes, 64-1152 bytes) are 16-byte
// aligned and take the vector loop.
__device__ void CopyWarp(uint8_t* dst, const uint8_t* src, uint64_t bytes, uint32_t lane) {
  const uint64_t align = reinterpret_cast<uint64_t>(dst) | reinterpret_cast<uint64_t>(src) | bytes;
  if (align % 16 == 0) {
    auto* d = reinterpret_cast<uint4*>(dst);
    const auto* s = reinterpret_cast<const uint4*>(src);
    for (uint64_t i = lane; i < bytes / 16; i += 32) d[i] = s[i];
  } else if (align % 4 == 0) {
    auto* d = reinterpret_cast<uint32_t*>(dst);
    const auto* s = reinterpret_cast<const uint32_t*>(src);
    for (uint64_t i = lane; i < bytes / 4; i += 32) d[i] = s[i];
  } else {
    for (uint64_t i = lane; i < bytes; i += 32) dst[i] = src[i];
  }
}

// One warp per piece, grid-stride over the table. Lane 0 reads the piece
// (one bus read when the table is in host memory) and broadcasts it.
__global__ void CopyPiecesKernel(const CopyPiece* pieces, uint32_t count) {
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warps = gridDim.x * kWarpsPerBlock;
  for (uint32_t i = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32; i < count; i += warps) {
    uint64_t dst = 0, src = 0, bytes = 0;
    if (lane == 0) {
      dst = pieces[i].dst;
      src = pieces[i].src;
      bytes = pieces[i].bytes;
    }
    dst = __shfl_sync(0xffffffffu, dst, 0);
    src = __shfl_sync(0xffffffffu, src, 0);
    bytes = __shfl_sync(0xffffffffu, bytes, 0);
    CopyWarp(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src), bytes, lane);
  }
}

}  // namespace

cudaError_t LaunchCopyPieces(const CopyPiece* pieces, uint32_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const uint32_t blocks = std::min(kMaxBlocks, (count + kWarpsPerBlock - 1) / kWarpsPerBlock);
  // A launch reports its error through the thread's last error: clear what
  // an earlier call left there so that it is not blamed on this launch (a
  // sticky error stays and is reported, as it should be).
  (void)cudaGetLastError();
  CopyPiecesKernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(pieces, count);
  return cudaGetLastError();
}

cudaError_t ProbeCopyKernel() {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, CopyPiecesKernel);
  (void)cudaGetLastError();
  return err;
}

}  // namespace kvtier::cuda
