// Test access to the CUDA copy engine: the same engine CreateCudaCopyEngine
// builds, with a hook that stands in for the CUDA calls of chosen blocks, so
// that tests on a real device can prove per-block error handling without
// breaking the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "gpu/cuda/pinned_pool.h"
#include "kvtier/copy_engine.h"
#include "kvtier/env.h"

namespace kvtier::cuda {

// Asked for every (engine block, layer) of a checked copy right before that
// block's copies of that layer are issued (Gather asks for every layer of a
// block before issuing it). Anything but cudaSuccess is handled exactly as if
// the CUDA call issuing that block's pieces had failed with it; a sticky
// error (IsStickyError) therefore loses the device for the engine. Runs on
// the calling thread, under the engine's lane lock: it must not call the
// engine.
using IssueFaultHook = std::function<cudaError_t(uint32_t engine_block, uint32_t layer)>;

// `log` takes the engine's warnings (a null one: warnings and errors to
// stderr). `tables` allocates the copy kernel's descriptor tables (an empty
// one: mapped pinned memory, as in the product).
Result<std::unique_ptr<CopyEngine>> TEST_CreateCudaCopyEngine(
    CudaCopyEngineOptions options, IssueFaultHook hook, std::shared_ptr<LogSink> log = nullptr,
    PinnedPool::Allocator tables = nullptr);

}  // namespace kvtier::cuda
