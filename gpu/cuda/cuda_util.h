// Move-only owners of CUDA runtime handles and the one conversion from
// cudaError_t to Status. Every CUDA call in kvtier goes through FromCuda, and
// every handle it creates lives in one of these owners, released in the
// destructor (errors there are ignored: there is nobody to report them to).
//
// Built only with CUDA. None of these may be static objects: their
// destructors must run while the driver is still loaded.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

#include "kvtier/copy_engine.h"
#include "kvtier/status.h"

namespace kvtier::cuda {

// Ok for cudaSuccess; otherwise "<what>: <error name>: <error text>" with
// the code mapped to a StatusCode: no driver, no device or an unsupported
// operation -> NotSupported, out of memory -> ResourceExhausted, invalid
// arguments -> InvalidArgument, busy or unavailable devices -> Unavailable,
// anything else (a failed copy or launch) -> IOError.
Status FromCuda(cudaError_t err, std::string_view what);

// True for the errors that leave the CUDA context unusable: every later call
// in the process fails with them (illegal address, launch failure, ECC ...).
bool IsStickyError(cudaError_t err);

// Whether the device has been lost, shared by an engine and its completion
// thread: once lost, every later copy fails at once with the first sticky
// error instead of being issued. Thread-safe.
class DeviceHealth {
 public:
  Status Lost() const;
  // Keeps the first status it is given.
  void MarkLost(const Status& why);

 private:
  mutable std::mutex mu_;
  Status lost_;  // guarded by mu_
};

// The calls ScopedDevice makes, so that its save and restore are tested
// without a device. `get` reads the calling thread's current context (null
// when it has none) and is false when it cannot be read; `set` makes a
// context (or none) current; `set_device` is cudaSetDevice.
struct ContextOps {
  std::function<bool(CUcontext* ctx)> get;
  std::function<bool(CUcontext ctx)> set;
  std::function<cudaError_t(int device)> set_device;
};

// cuCtxGetCurrent and cuCtxSetCurrent, reached through the runtime's driver
// entry point (kvtier links only the CUDA runtime), and cudaSetDevice. Where
// the driver does not offer them, `get` is false.
const ContextOps& DriverContextOps();

// The calling thread's current context, or null when it has none (or it
// cannot be read).
CUcontext CurrentContext();

// Makes `device` current on this thread for its scope, then makes current
// exactly the context the thread had before, or none if it had none: the
// engine's callers' threads are theirs, and a thread that never chose a
// device must not be left bound to one (a later CUDA call on it would act
// on that device, and restoring "device 0" would create device 0's context
// in a process that serves another GPU). The runtime may go on naming
// `device` in cudaGetDevice on a thread left without a context; no context is
// created by that. If the context cannot be read, nothing is restored.
// status() is the cudaSetDevice result.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device, const ContextOps& ops = DriverContextOps());
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  cudaError_t status() const { return status_; }

 private:
  const ContextOps& ops_;
  bool restore_ = false;          // whether previous_ is to be made current again
  CUcontext previous_ = nullptr;  // null: no context
  cudaError_t status_ = cudaSuccess;
};

// A non-blocking stream (no implicit ordering with the legacy default stream).
class Stream {
 public:
  // At the lowest priority the device offers, so copies yield the SMs to the
  // engine's compute kernels.
  static Result<Stream> CreateLowPriority();
  Stream() = default;
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  cudaStream_t get() const { return stream_; }

 private:
  explicit Stream(cudaStream_t s) : stream_(s) {}
  cudaStream_t stream_ = nullptr;
};

// An event without timing (cheapest to record and query).
class Event {
 public:
  static Result<Event> Create();
  Event() = default;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  cudaEvent_t get() const { return event_; }

 private:
  explicit Event(cudaEvent_t e) : event_(e) {}
  cudaEvent_t event_ = nullptr;
};

// Page-locked, device-mapped host memory from cudaHostAlloc.
class PinnedBuffer {
 public:
  static Result<PinnedBuffer> Allocate(size_t bytes);
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_, size_}; }

 private:
  PinnedBuffer(std::byte* data, size_t size) : data_(data), size_(size) {}
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Host memory allocated elsewhere (the host arena's mmap), registered with
// cudaHostRegister (portable, mapped) for as long as this object lives.
// Registered, and unregistered on whatever thread destroys it, with
// `device` current (ScopedDevice), so that no other device's context is
// created for it.
class RegisteredHostMemory final : public HostMemoryPin {
 public:
  static Result<std::unique_ptr<RegisteredHostMemory>> Register(int device,
                                                                std::span<std::byte> memory);
  ~RegisteredHostMemory() override;
  RegisteredHostMemory(const RegisteredHostMemory&) = delete;
  RegisteredHostMemory& operator=(const RegisteredHostMemory&) = delete;

  std::span<std::byte> memory() const { return memory_; }

 private:
  RegisteredHostMemory(int device, std::span<std::byte> memory)
      : device_(device), memory_(memory) {}
  const int device_;
  std::span<std::byte> memory_;
};

// The device address through which kernels reach host byte `host`, or null
// when `host` is not in page-locked, mapped memory (e.g. plain malloc).
void* MappedDevicePointer(const void* host);
// The device address of host bytes [host, host + size), or null unless the
// last byte is mapped too, at the same distance: a buffer that starts in a
// registered range and runs past it would have a kernel read unmapped device
// addresses, an illegal-address fault that ends the whole CUDA context.
void* MappedDeviceRange(const void* host, size_t size);

}  // namespace kvtier::cuda
