// DMA issue for the CUDA copy engine (dma_issue.h).
#include "gpu/cuda/dma_issue.h"

#include <string>
#include <vector>

namespace kvtier::cuda {
// CUDA 12.8 added the batch call with a failIdx argument and non-const
// sources; 13.0 dropped failIdx and made the sources const.
namespace {

cudaError_t BatchCopy(std::vector<void*>& dsts, std::vector<const void*>& srcs,
                      std::vector<size_t>& sizes, cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  size_t attr_index = 0;
#if CUDART_VERSION >= 13000
  return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attr,
                              &attr_index, 1, stream);
#else
  // Before 13.0 the sources were declared `void**`; they are only read.
  size_t fail_index = 0;
  return cudaMemcpyBatchAsync(dsts.data(), const_cast<void**>(srcs.data()), sizes.data(),
                              dsts.size(), &attr, &attr_index, 1, &fail_index, stream);
#endif
#else
  (void)dsts, (void)srcs, (void)sizes, (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace

CallError IssueDma(std::span<const CopyPiece> pieces, bool pinned, cudaStream_t stream) {
  if (pieces.empty()) return {};
  if (pinned && pieces.size() > 1) {
    // One driver call for the whole set; it needs page-locked host memory to
    // stay asynchronous. The arrays are read during the call only.
    std::vector<void*> dsts(pieces.size());
    std::vector<const void*> srcs(pieces.size());
    std::vector<size_t> sizes(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      dsts[i] = reinterpret_cast<void*>(pieces[i].dst);
      srcs[i] = reinterpret_cast<const void*>(pieces[i].src);
      sizes[i] = pieces[i].bytes;
    }
    const cudaError_t err = BatchCopy(dsts, srcs, sizes, stream);
    if (err == cudaSuccess) return {};
    if (err != cudaErrorNotSupported && err != cudaErrorCallRequiresNewerDriver) {
      return {err, "cudaMemcpyBatchAsync of " + std::to_string(pieces.size()) + " pieces"};
    }
    cudaGetLastError();  // an older driver: fall back to one call per piece
  }
  for (const CopyPiece& p : pieces) {
    const cudaError_t err =
        cudaMemcpyAsync(reinterpret_cast<void*>(p.dst), reinterpret_cast<const void*>(p.src),
                        p.bytes, cudaMemcpyDefault, stream);
    if (err != cudaSuccess) return {err, "cudaMemcpyAsync"};
  }
  return {};
}

}  // namespace kvtier::cuda
