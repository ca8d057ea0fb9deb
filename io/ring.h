// Ring: the one owner of a liburing `struct io_uring`. Move-only; the
// destructor tears the ring down. It is a thin handle: which thread may touch
// it is the caller's business (UringEngine gives each ring one owner thread).
#pragma once

#include <liburing.h>

#include <cstdint>
#include <memory>

#include "kvtier/status.h"

namespace kvtier::internal {

class Ring {
 public:
  // A ring with `entries` submission slots (rounded up to a power of two by
  // the kernel). Errors name io_uring_queue_init and the errno text, e.g.
  // NotSupported when io_uring is disabled.
  static Result<Ring> Create(uint32_t entries);

  Ring() = default;  // empty: valid() is false
  Ring(Ring&& other) noexcept = default;
  Ring& operator=(Ring&& other) noexcept;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring();

  bool valid() const { return ring_ != nullptr; }
  // REQUIRES: valid().
  io_uring* get() { return ring_.get(); }
  uint32_t entries() const { return entries_; }

  // Registers `count` buffers as fixed buffers. A refusal (locked-memory
  // limit) is returned, never fatal: callers fall back to plain buffers.
  Status RegisterBuffers(const struct iovec* iov, unsigned count);
  // Registers one file as fixed file index 0.
  Status RegisterFile(int fd);

 private:
  struct Deleter {
    void operator()(io_uring* r) const;
  };
  std::unique_ptr<io_uring, Deleter> ring_;
  uint32_t entries_ = 0;
};

}  // namespace kvtier::internal
