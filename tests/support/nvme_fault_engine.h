// FaultIoEngine: an IoEngine decorator that injects the failures a real
// device shows, for the NVMe tier's fault suite. Faults are switched at run
// time through IoFaults (atomics), so a test can write cleanly, then break
// the device and read.
//
//   read_errno / write_errno  the request fails with that errno, e.g. EIO or
//                             ENOSPC, as "fault engine <op> at offset N: ..."
//   fsync_errno               the same for syncs (IoOp::kFsync)
//   torn_reads                the device fills only the first half of each
//                             read's bytes but reports success (what a
//                             lying device or a torn DMA looks like)
//   short_reads/short_writes  the device moves only the first half of the
//                             bytes and says so: the completion is OK with
//                             `bytes` below the request's length (a short
//                             count, no errno)
//   stall_reads/stall_writes  the request is sent to a pipe that never
//                             answers, so the inner engine's deadline fires
//   stall_fsync               the same for syncs; the completion is the
//                             inner engine's DeadlineExceeded
//   min_bytes                 reads and writes of fewer bytes pass untouched
//                             (e.g. to fail only reclaim's large reads)
//   from_offset / to_offset   requests starting outside [from, to) pass
//                             untouched (e.g. to fail one region only)
//   around_read_done          called with true just before a read's
//                             completion runs and false just after, on the
//                             engine's thread (e.g. to fail allocations there)
//
// Every fault completes the way the inner engine completes any request: on
// its thread, after Submit has returned, never inside Submit. An errno fault
// goes down as a harmless request (an fsync of a pipe, which touches neither
// the caller's buffers nor the file) whose completion carries the errno.
#pragma once

#include <atomic>
#include <memory>

#include "io/io_engine.h"

namespace kvtier::testing {

struct IoFaults {
  std::atomic<int> read_errno{0};
  std::atomic<int> write_errno{0};
  std::atomic<int> fsync_errno{0};
  std::atomic<bool> torn_reads{false};
  std::atomic<bool> short_reads{false};
  std::atomic<bool> short_writes{false};
  std::atomic<bool> stall_reads{false};
  std::atomic<bool> stall_writes{false};
  std::atomic<bool> stall_fsync{false};
  std::atomic<uint64_t> min_bytes{0};
  // Only requests that start in [from_offset, to_offset) are faulted.
  std::atomic<uint64_t> from_offset{0};
  std::atomic<uint64_t> to_offset{UINT64_MAX};
  std::atomic<void (*)(bool)> around_read_done{nullptr};
  std::atomic<uint64_t> injected{0};  // requests a fault was applied to
};

// Wraps `inner`; `faults` must outlive the engine.
std::unique_ptr<internal::IoEngine> NewFaultIoEngine(std::unique_ptr<internal::IoEngine> inner,
                                                     IoFaults* faults);

}  // namespace kvtier::testing
