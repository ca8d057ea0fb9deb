// PinnedPool: reusable mapped pinned buffers for the copy kernel's
// descriptor tables. cudaHostAlloc costs far more than a copy of a few
// blocks, so tables are allocated once and recycled; each in-flight copy
// holds a Lease until its last event completes.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cuda {

class PinnedPool {
 public:
  // Memory the pool hands out: host bytes and the device address of the
  // same bytes. Released in the destructor.
  class Buffer {
   public:
    virtual ~Buffer() = default;
    virtual void* host() const = 0;
    virtual void* device() const = 0;
    virtual size_t size() const = 0;
  };
  // Allocates a buffer of exactly `bytes`. May call CUDA.
  using Allocator = std::function<Result<std::unique_ptr<Buffer>>(size_t bytes)>;

  // Page-locked, device-mapped memory from cudaHostAlloc.
  static Allocator MappedPinnedAllocator();

  // Idle buffers kept for reuse: bounds the pinned memory the pool holds
  // while no copy runs.
  static constexpr size_t kDefaultMaxFreeBytes = size_t{256} << 20;
  static constexpr size_t kMaxFree = 16;

  // A buffer of at least the requested size; returned to the pool when the
  // lease is destroyed. The pool must outlive its leases.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    void* host() const { return buffer_->host(); }
    void* device() const { return buffer_->device(); }  // the same bytes, as kernels address them
    size_t size() const { return buffer_->size(); }

   private:
    friend class PinnedPool;
    Lease(PinnedPool* pool, std::unique_ptr<Buffer> buffer)
        : pool_(pool), buffer_(std::move(buffer)) {}
    PinnedPool* pool_;
    std::unique_ptr<Buffer> buffer_;
  };

  explicit PinnedPool(Allocator allocate = MappedPinnedAllocator(),
                      size_t max_free_bytes = kDefaultMaxFreeBytes);
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  // Frees every idle buffer. REQUIRES: no lease outlives the pool.
  ~PinnedPool();

  // Reuses the smallest idle buffer that is large enough, else allocates one
  // (sizes are rounded up to a power of two, at least 64 KiB, so few sizes
  // exist). Idle buffers beyond the byte and count caps, set aside when
  // leases end, are freed here, on the calling thread: a lease may end on
  // the completion thread, which must not wait for cudaFreeHost (it
  // synchronizes the device). Thread-safe.
  Result<Lease> Acquire(size_t bytes);

 private:
  void Return(std::unique_ptr<Buffer> buffer) noexcept;

  const Allocator allocate_;
  const size_t max_free_bytes_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Buffer>> free_;     // guarded by mu_; kept for reuse
  size_t free_bytes_ = 0;                         // guarded by mu_; sum over free_
  std::vector<std::unique_ptr<Buffer>> retired_;  // guarded by mu_; to be freed by Acquire
};

}  // namespace kvtier::cuda
