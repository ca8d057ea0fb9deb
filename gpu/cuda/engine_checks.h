// What the CUDA copy engine checks when it is created: that each engine
// tensor is device memory on the engine's device and large enough for the
// layout, and whether the copy kernel can run on the device. The decisions
// are plain functions of what CUDA reported, so that they are tested without
// a device. Not for use outside gpu/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "kvtier/copy_engine.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::cuda {

// The path the engine runs, given the one asked for and what probing the
// copy kernel on the device returned (cudaFuncGetAttributes; not asked for
// kDma). A kernel with no image for the device (cudaErrorNoKernelImageForDevice,
// cudaErrorInvalidDeviceFunction: the build's CUDA architectures leave the
// device out): kAuto falls back to kDma, logged as a warning on `log`;
// kKernel is NotSupported. Any other probe error is returned as FromCuda
// says. `device_name` names the device in messages ("device 0 (sm_75)").
Result<CudaCopyPath> ChooseCopyPath(CudaCopyPath requested, cudaError_t kernel_probe,
                                    const std::string& device_name, LogSink& log);

// Where the allocation holding device address `addr` starts and how long it
// is, and whether it is a virtual memory mapping (cuMemMap); false when
// `addr` is in none.
using AddressRange =
    std::function<bool(uint64_t addr, uint64_t* base, uint64_t* size, bool* mapped)>;

// InvalidArgument unless `need` bytes from `ptr` lie in allocations: the one
// holding `ptr` and, while it and the next are virtual memory mappings,
// those mapped right after it (virtual memory allocators, e.g. PyTorch's
// expandable segments, map a tensor as several ranges). Separate
// allocations (cudaMalloc) that merely lie back to back are never summed: a
// tensor too small for the layout would otherwise pass, and its last block
// be copied into the next allocation.
// "cuda copy engine: tensor <index> at 0x...: <n> bytes mapped from the
// pointer; the layout needs <need> (EngineTensorBytes)".
Status CheckTensorRange(size_t index, uint64_t ptr, uint64_t need, const AddressRange& range);

// Each tensor of `options` must be device (or managed) memory on
// options.device with EngineTensorBytes(layout) bytes mapped from the
// pointer (CheckTensorRange over cuMemGetAddressRange, where the driver
// offers it).
// InvalidArgument naming the tensor otherwise. REQUIRES: options.device is
// current.
Status CheckTensors(const CudaCopyEngineOptions& options);

// Whether the compute stream belongs to the engine's device, given what
// cudaStreamGetDevice returned for it (`query`, and `stream_device` when it
// succeeded). A stream of another device is InvalidArgument naming both
// devices: every copy ordered after it would fail. An invalid handle is
// InvalidArgument too. A driver that cannot answer (cudaErrorNotSupported,
// cudaErrorCallRequiresNewerDriver) lets it pass; any other error is
// returned as FromCuda says.
Status CheckStreamDevice(cudaError_t query, int stream_device, int device);

// CheckStreamDevice for options.compute_stream (with a runtime older than
// 12.8, which lacks cudaStreamGetDevice: Ok). REQUIRES: options.device is
// current.
Status CheckComputeStream(const CudaCopyEngineOptions& options);

// "device <n> (sm_<major><minor>)", or "device <n>" when its compute
// capability cannot be read.
std::string DeviceName(int device);

}  // namespace kvtier::cuda
