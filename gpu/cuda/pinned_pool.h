// PinnedPool: reusable mapped pinned buffers for the copy kernel's
// descriptor tables. cudaHostAlloc costs far more than a copy of a few
// blocks, so tables are allocated once and recycled; each in-flight copy
// holds a Lease until its last event completes.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "gpu/cuda/cuda_util.h"

namespace kvtier::cuda {

class PinnedPool {
 public:
  // A buffer of at least the requested size; returned to the pool when the
  // lease is destroyed. The pool must outlive its leases.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    void* host() const { return buffer_.data(); }
    void* device() const { return device_; }  // the same bytes, as kernels address them

   private:
    friend class PinnedPool;
    Lease(PinnedPool* pool, PinnedBuffer buffer, void* device)
        : pool_(pool), buffer_(std::move(buffer)), device_(device) {}
    PinnedPool* pool_;
    PinnedBuffer buffer_;
    void* device_;
  };

  PinnedPool() = default;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // Reuses a free buffer that is large enough, else allocates one (sizes are
  // rounded up to a power of two, at least 64 KiB, so few sizes exist).
  // Thread-safe.
  Result<Lease> Acquire(size_t bytes);

 private:
  static constexpr size_t kMaxFree = 16;  // bounds the pinned memory kept idle

  void Return(PinnedBuffer buffer);

  std::mutex mu_;
  std::vector<PinnedBuffer> free_;  // guarded by mu_
};

}  // namespace kvtier::cuda
