// Checks of the CUDA copy engine at creation (engine_checks.h).
#include "gpu/cuda/engine_checks.h"

#include <cuda.h>

#include <sstream>
#include <string>

#include "gpu/cuda/cuda_util.h"

namespace kvtier::cuda {
namespace {

std::string Hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Driver functions through the runtime's driver entry point, so that kvtier
// links only the CUDA runtime. Null where the driver does not offer one.
using GetAddressRange = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);
using RetainAllocationHandle = CUresult (*)(CUmemGenericAllocationHandle* handle, void* addr);
using ReleaseHandle = CUresult (*)(CUmemGenericAllocationHandle handle);

void* DriverFunction([[maybe_unused]] const char* name) {
#if CUDART_VERSION >= 12050
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return fn;
#else
  return nullptr;
#endif
}

}  // namespace

Result<CudaCopyPath> ChooseCopyPath(CudaCopyPath requested, cudaError_t kernel_probe,
                                    const std::string& device_name, LogSink& log) {
  if (requested == CudaCopyPath::kDma || kernel_probe == cudaSuccess) return requested;
  if (kernel_probe != cudaErrorNoKernelImageForDevice &&
      kernel_probe != cudaErrorInvalidDeviceFunction) {
    return FromCuda(kernel_probe, "cuda copy engine: cudaFuncGetAttributes of the copy kernel");
  }
  const std::string why =
      "the copy kernel has no image for " + device_name +
      " (this build's CMAKE_CUDA_ARCHITECTURES leave it out): " + cudaGetErrorName(kernel_probe);
  if (requested == CudaCopyPath::kKernel) {
    return Status::NotSupported("cuda copy engine: " + why +
                                "; rebuild for the device or choose the DMA path");
  }
  log.Log(LogLevel::kWarning,
          "cuda copy engine: " + why + "; every batch is copied by DMA instead");
  return CudaCopyPath::kDma;
}

Status CheckTensorRange(size_t index, uint64_t ptr, uint64_t need, const AddressRange& range) {
  uint64_t have = 0;
  uint64_t at = ptr;
  bool mapped = false;  // of the range before `at`
  while (have < need) {
    uint64_t base = 0, size = 0;
    bool next_mapped = false;
    if (!range(at, &base, &size, &next_mapped) || at < base || at - base >= size) break;
    if (at != ptr && !(mapped && next_mapped)) break;  // another allocation
    have += size - (at - base);
    at = base + size;
    mapped = next_mapped;
  }
  if (have >= need) return Status::Ok();
  return Status::InvalidArgument("cuda copy engine: tensor " + std::to_string(index) + " at " +
                                 Hex(ptr) + ": " + std::to_string(have) +
                                 " bytes mapped from the pointer; the layout needs " +
                                 std::to_string(need) + " (EngineTensorBytes)");
}

Status CheckTensors(const CudaCopyEngineOptions& options) {
  const uint64_t need = EngineTensorBytes(options.layout);
  const auto range = reinterpret_cast<GetAddressRange>(DriverFunction("cuMemGetAddressRange"));
  const auto retain =
      reinterpret_cast<RetainAllocationHandle>(DriverFunction("cuMemRetainAllocationHandle"));
  const auto release = reinterpret_cast<ReleaseHandle>(DriverFunction("cuMemRelease"));
  // Whether `addr` lies in a cuMemMap mapping (the only memory the driver
  // keeps an allocation handle for); never, where it cannot say.
  auto is_mapping = [retain, release](CUdeviceptr addr) {
    if (retain == nullptr || release == nullptr) return false;
    CUmemGenericAllocationHandle handle{};
    if (retain(&handle, reinterpret_cast<void*>(addr)) != CUDA_SUCCESS) return false;
    (void)release(handle);
    return true;
  };
  for (size_t i = 0; i < options.tensors.size(); ++i) {
    cudaPointerAttributes attr{};
    Status st =
        FromCuda(cudaPointerGetAttributes(&attr, options.tensors[i]), "cudaPointerGetAttributes");
    if (st.ok() && (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)) {
      st = Status::InvalidArgument("not device memory");
    } else if (st.ok() && attr.device != options.device) {
      st = Status::InvalidArgument("on device " + std::to_string(attr.device) + ", not " +
                                   std::to_string(options.device));
    }
    if (!st.ok()) return st.WithContext("cuda copy engine: tensor " + std::to_string(i));
    if (range == nullptr) continue;
    const auto ptr = reinterpret_cast<uint64_t>(options.tensors[i]);
    KVTIER_RETURN_IF_ERROR(CheckTensorRange(
        i, ptr, need,
        [range, &is_mapping](uint64_t addr, uint64_t* base, uint64_t* size, bool* mapped) {
          CUdeviceptr b = 0;
          size_t n = 0;
          if (range(&b, &n, static_cast<CUdeviceptr>(addr)) != CUDA_SUCCESS) {
            return false;
          }
          *base = b;
          *size = n;
          *mapped = is_mapping(static_cast<CUdeviceptr>(addr));
          return true;
        }));
  }
  return Status::Ok();
}

Status CheckStreamDevice(cudaError_t query, int stream_device, int device) {
  switch (query) {
    case cudaSuccess:
      if (stream_device == device) return Status::Ok();
      return Status::InvalidArgument("cuda copy engine: compute_stream belongs to device " +
                                     std::to_string(stream_device) +
                                     ", not to the engine's device " + std::to_string(device) +
                                     "; pass the stream the engine computes on, on options.device");
    case cudaErrorNotSupported:
    case cudaErrorCallRequiresNewerDriver:
      return Status::Ok();
    case cudaErrorInvalidResourceHandle:
    case cudaErrorContextIsDestroyed:
      return Status::InvalidArgument(
          std::string("cuda copy engine: compute_stream is not a live stream: ") +
          cudaGetErrorName(query));
    default:
      return FromCuda(query, "cuda copy engine: cudaStreamGetDevice of compute_stream");
  }
}

Status CheckComputeStream(const CudaCopyEngineOptions& options) {
#if CUDART_VERSION >= 12080
  int stream_device = -1;
  const cudaError_t query =
      cudaStreamGetDevice(static_cast<cudaStream_t>(options.compute_stream), &stream_device);
  if (query != cudaSuccess) cudaGetLastError();
  return CheckStreamDevice(query, stream_device, options.device);
#else
  (void)options;
  return Status::Ok();
#endif
}

std::string DeviceName(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return "device " + std::to_string(device);
  }
  return "device " + std::to_string(device) + " (sm_" + std::to_string(major) +
         std::to_string(minor) + ")";
}

}  // namespace kvtier::cuda
