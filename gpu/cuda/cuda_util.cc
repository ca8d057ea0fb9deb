#include "gpu/cuda/cuda_util.h"

#include <cstddef>
#include <string>
#include <utility>

namespace kvtier::cuda {

Status FromCuda(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status::Ok();
  std::string m(what);
  m += ": ";
  m += cudaGetErrorName(err);
  m += ": ";
  m += cudaGetErrorString(err);
  switch (err) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorNotSupported:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorStubLibrary:
    case cudaErrorInvalidDevice:
      return Status::NotSupported(m);
    case cudaErrorMemoryAllocation:
      return Status::ResourceExhausted(m);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
      return Status::InvalidArgument(m);
    case cudaErrorDevicesUnavailable:
      return Status::Unavailable(m);
    default:
      return Status::IOError(m);
  }
}

bool IsStickyError(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorContextIsDestroyed:
    case cudaErrorExternalDevice:
    case cudaErrorUnknown:
#if CUDART_VERSION >= 12080
    // Hopper's error containment, and the other codes the runtime documents
    // as leaving the process unable to use the device.
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
#endif
      return true;
    default:
      return false;
  }
}

Status DeviceHealth::Lost() const {
  std::lock_guard lock(mu_);
  return lost_;
}

void DeviceHealth::MarkLost(const Status& why) {
  std::lock_guard lock(mu_);
  if (lost_.ok()) lost_ = why;
}

namespace {

using CtxGetCurrent = CUresult (*)(CUcontext* ctx);
using CtxSetCurrent = CUresult (*)(CUcontext ctx);

// A driver function through the runtime's entry point; null where the driver
// does not offer it.
void* DriverFunction(const char* name) {
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
  (void)name;
  return nullptr;
#endif
}

ContextOps MakeDriverContextOps() {
  const auto get = reinterpret_cast<CtxGetCurrent>(DriverFunction("cuCtxGetCurrent"));
  const auto set = reinterpret_cast<CtxSetCurrent>(DriverFunction("cuCtxSetCurrent"));
  ContextOps ops;
  ops.get = [get, set](CUcontext* ctx) {
    return get != nullptr && set != nullptr && get(ctx) == CUDA_SUCCESS;
  };
  ops.set = [set](CUcontext ctx) { return set != nullptr && set(ctx) == CUDA_SUCCESS; };
  ops.set_device = [](int device) { return cudaSetDevice(device); };
  return ops;
}

}  // namespace

const ContextOps& DriverContextOps() {
  static const ContextOps ops = MakeDriverContextOps();  // function pointers only
  return ops;
}

CUcontext CurrentContext() {
  CUcontext ctx = nullptr;
  if (!DriverContextOps().get(&ctx)) return nullptr;
  return ctx;
}

ScopedDevice::ScopedDevice(int device, const ContextOps& ops) : ops_(ops) {
  restore_ = ops_.get(&previous_);
  status_ = ops_.set_device(device);
  // A failed cudaSetDevice left the thread's context as it was.
  if (status_ != cudaSuccess) restore_ = false;
}

ScopedDevice::~ScopedDevice() {
  if (restore_) ops_.set(previous_);
}

// ---- Stream ----------------------------------------------------------------

Result<Stream> Stream::CreateLowPriority() {
  // Numerically greatest is lowest priority.
  int least = 0, greatest = 0;
  KVTIER_RETURN_IF_ERROR(FromCuda(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                                  "cudaDeviceGetStreamPriorityRange"));
  cudaStream_t s = nullptr;
  KVTIER_RETURN_IF_ERROR(FromCuda(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, least),
                                  "cudaStreamCreateWithPriority"));
  return Stream(s);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}
Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

// ---- Event -----------------------------------------------------------------

Result<Event> Event::Create() {
  cudaEvent_t e = nullptr;
  KVTIER_RETURN_IF_ERROR(
      FromCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
  return Event(e);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}
// Destroying an event whose work is still pending is allowed: the driver
// frees it once the work completes.
Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

// ---- PinnedBuffer ----------------------------------------------------------

Result<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  void* p = nullptr;
  KVTIER_RETURN_IF_ERROR(
      FromCuda(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped),
               "cudaHostAlloc of " + std::to_string(bytes) + " bytes"));
  return PinnedBuffer(static_cast<std::byte*>(p), bytes);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}
PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

// ---- RegisteredHostMemory ----------------------------------------------------

Result<std::unique_ptr<RegisteredHostMemory>> RegisteredHostMemory::Register(
    int device, std::span<std::byte> memory) {
  if (memory.empty()) return Status::InvalidArgument("cudaHostRegister: empty range");
  ScopedDevice current(device);
  KVTIER_RETURN_IF_ERROR(FromCuda(current.status(), "cudaSetDevice"));
  KVTIER_RETURN_IF_ERROR(
      FromCuda(cudaHostRegister(memory.data(), memory.size(),
                                cudaHostRegisterPortable | cudaHostRegisterMapped),
               "cudaHostRegister of " + std::to_string(memory.size()) + " bytes"));
  return std::unique_ptr<RegisteredHostMemory>(new RegisteredHostMemory(device, memory));
}

RegisteredHostMemory::~RegisteredHostMemory() {
  ScopedDevice current(device_);
  cudaHostUnregister(memory_.data());
}

void* MappedDevicePointer(const void* host) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, host) != cudaSuccess) {
    cudaGetLastError();  // unregistered memory may report an error: clear it
    return nullptr;
  }
  if (attr.type != cudaMemoryTypeHost) return nullptr;
  return attr.devicePointer;
}

void* MappedDeviceRange(const void* host, size_t size) {
  void* first = MappedDevicePointer(host);
  if (first == nullptr || size <= 1) return first;
  void* last = MappedDevicePointer(static_cast<const std::byte*>(host) + (size - 1));
  if (last == nullptr || static_cast<std::byte*>(last) - static_cast<std::byte*>(first) !=
                             static_cast<std::ptrdiff_t>(size - 1)) {
    return nullptr;
  }
  return first;
}

}  // namespace kvtier::cuda
