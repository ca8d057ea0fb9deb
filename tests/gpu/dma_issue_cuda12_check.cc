// A build-time check, not a test binary: gpu/cuda/dma_issue.cc compiled as a
// CUDA 12.8 or 12.9 runtime declares cudaMemcpyBatchAsync (a failIdx
// argument, and sources as `void**`, which became `const void* const*` in
// 13.0). Only 13.x headers may be installed, so the older declaration is
// stated here; the build fails if dma_issue.cc stops compiling against it.
#include <cuda_runtime_api.h>

#if CUDART_VERSION >= 13000
#undef CUDART_VERSION
#define CUDART_VERSION 12080
// C++ linkage: an overload beside the runtime's 13.x function, never called.
cudaError_t cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes, size_t count,
                                 cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 size_t* failIdx, cudaStream_t hStream);
#endif

#include "gpu/cuda/dma_issue.cc"  // NOLINT(bugprone-suspicious-include)
