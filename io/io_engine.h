// IoEngine: asynchronous file I/O as requests and completion records
// {id, status, bytes}. The NVMe tier talks only to this interface, so tests
// can slide a fault-injecting engine under it (tests/support/nvme_fault_*).
//
// Contract of every engine:
//   - Submit() never blocks: a request that does not fit the bounded queue is
//     refused (Busy) before anything of the batch is queued.
//   - Every accepted request gets exactly one completion, on the engine's
//     thread; a completion arrives within the request's deadline (plus
//     scheduling), as DeadlineExceeded when the device did not answer. The
//     deadline counts from when the request is issued to the device; time
//     spent queued behind other I/O has its own, longer bound.
//   - A read or write completes OK only when every byte of its iovecs moved;
//     anything less is an error naming the operation, offset and byte counts.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

enum class IoOp : uint8_t { kRead, kWrite, kFsync };

std::string_view IoOpName(IoOp op);  // "read", "write", "fsync"

struct IoCompletion {
  uint64_t id = 0;
  Status status;
  uint64_t bytes = 0;  // bytes moved (the full length when OK)
};

struct IoRequest {
  IoOp op = IoOp::kRead;
  int fd = -1;
  uint64_t offset = 0;
  // Buffers; for O_DIRECT files 4 KiB-aligned in address and length. They
  // must stay valid until `done` runs. Empty for kFsync.
  std::vector<iovec> iov;
  uint64_t id = 0;  // echoed in the completion
  // Runs once, on the engine's thread; must not block. What it throws is
  // dropped: the engine goes on with the other requests.
  std::function<void(const IoCompletion&)> done;

  uint64_t Bytes() const {
    uint64_t n = 0;
    for (const iovec& v : iov) n += v.iov_len;
    return n;
  }
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // Queues all of `requests` or none: Busy when the queue lacks room,
  // Unavailable after Shutdown(), ResourceExhausted when memory runs out.
  // On error no `done` is called.
  // Thread-safe.
  virtual Status Submit(std::vector<IoRequest> requests) = 0;

  // Refuses new requests, completes every accepted one, joins the engine's
  // thread. Idempotent.
  virtual void Shutdown() = 0;

  // Registers `ranges` (page-aligned memory that outlives the engine) as
  // fixed buffers: a read or write whose single iovec lies inside one of
  // them then skips the per-request page pinning. Returns the bytes
  // registered, a prefix of `ranges`, fewer when the kernel's locked-memory
  // limit refuses the rest (those stay plain I/O). Registration happens once;
  // later calls return 0. Thread-safe, also while I/O is in flight.
  virtual uint64_t RegisterBuffers(std::span<const iovec> /*ranges*/) { return 0; }
  // Whether [p, p + len) lies inside one registered buffer.
  virtual bool IsRegistered(const void* /*p*/, uint64_t /*len*/) const { return false; }
  // Registers `fd` as the ring's fixed file; requests on it then skip the
  // per-request file lookup. Call before submitting requests on `fd`.
  virtual Status RegisterFile(int /*fd*/) { return Status::NotSupported("no fixed files"); }
  // Reads and writes issued as READ_FIXED / WRITE_FIXED so far.
  virtual uint64_t FixedBufferIos() const { return 0; }
};

struct UringEngineOptions {
  uint32_t queue_depth = 64;   // requests in flight in the kernel at once
  uint32_t max_queued = 1024;  // accepted but not yet in flight; beyond: Busy
  // Deadline of every request, counted from its first issue to the ring
  // (IORING_OP_LINK_TIMEOUT); resubmissions of a short or -EAGAIN request
  // keep it. I/O the device has already started completes only when the
  // device (or the kernel's block layer timeout) ends it. A request still
  // queued because every queue_depth slot is busy fails with
  // DeadlineExceeded ("never issued") after waiting
  // (2 + k / queue_depth) * timeout_ms, k being the requests queued ahead of
  // it at Submit: long enough that one the device serves in time never fails
  // for having waited, yet no request waits unanswered for ever.
  uint32_t timeout_ms = 1000;
  uint32_t eagain_retries = 16;  // -EAGAIN is resubmitted this many times
};

// An io_uring engine with one owner thread. Short reads and writes are
// resubmitted for the remainder within the same deadline. ResourceExhausted
// when the thread cannot be started.
Result<std::unique_ptr<IoEngine>> NewUringEngine(const UringEngineOptions& options);

}  // namespace kvtier::internal
