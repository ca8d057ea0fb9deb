// Registered staging memory for the client's RDMA batches (rdma_link.h):
// block headers, and payloads outside the registered host arena, are copied
// through it. Registering memory is a system call that pins pages, far too
// slow to do per batch, so a pool keeps up to `max_buffers` registered
// buffers of `buffer_bytes` and lends one per batch. It grows on demand: a
// buffer is registered the first time every pooled one is lent out. A batch
// that needs more than `buffer_bytes`, or arrives while the pool is at its
// bound with every buffer lent, gets a one-off registration of its own that
// is released with it.
//
// Threads: Acquire on the link's loop thread; a Lease may be dropped on any
// thread (the last completion closure of a batch may run on the device's
// poller). Leases keep the pool's buffers alive, so a pool may be destroyed
// while batches are still in flight; its buffers go when their last lease
// does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kvtier/status.h"
#include "tiers/remote/rdma_transport.h"

namespace kvtier::internal::memd {

struct RdmaStagingOptions {
  // Bytes of one pooled buffer. A batch of kMaxBatchItems headers (256 KiB)
  // fits, so a batch whose payloads lie in the registered arena never needs
  // a one-off registration.
  size_t buffer_bytes = 1 << 20;
  size_t max_buffers = 4;  // pooled buffers at most, lent or idle
  Status Validate() const;
};

class RdmaStagingPool {
  struct Shared;  // the idle buffers, shared with leases (rdma_staging.cc)

 public:
  // Memory lent to one batch. Move-only; returns a pooled buffer to the pool
  // (or releases a one-off registration) when destroyed or reset.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { Reset(); }

    // The bytes asked for (the buffer may be larger); empty for a lease of 0.
    std::span<std::byte> bytes() const { return bytes_; }
    uint32_t lkey() const { return lkey_; }
    bool pooled() const { return pooled_; }
    void Reset();

   private:
    friend class RdmaStagingPool;
    std::shared_ptr<Shared> shared_;
    std::unique_ptr<std::byte[]> buffer_;
    std::unique_ptr<RdmaMemory> mr_;  // registers buffer_; released before it
    std::span<std::byte> bytes_;
    uint32_t lkey_ = 0;
    bool pooled_ = false;
  };

  // REQUIRES: options.Validate() is OK; `device` outlives this and every
  // lease.
  RdmaStagingPool(RdmaDevice& device, const RdmaStagingOptions& options);
  ~RdmaStagingPool();
  RdmaStagingPool(const RdmaStagingPool&) = delete;
  RdmaStagingPool& operator=(const RdmaStagingPool&) = delete;

  // Registered memory of at least `bytes` (none for 0). The device's error
  // when a registration fails.
  Result<Lease> Acquire(size_t bytes);

  // Pooled buffers registered so far (lent or idle), and those idle now.
  size_t pooled() const;
  size_t idle() const;

 private:
  RdmaDevice& device_;
  const RdmaStagingOptions options_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace kvtier::internal::memd
