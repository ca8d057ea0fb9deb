// Options that only a tier of type nvme reads, kept in TierOptions::nvme.
// Plain struct: every field has a default and a comment; TierOptions::Validate
// checks them when the tier's type is nvme. The data file (`path`) and the
// region size (`region_bytes`) are common TierOptions fields.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

struct NvmeTierOptions {
  // Deadline of every device I/O, counted from when it is issued to the
  // device; a request the device has not answered by then fails with
  // DeadlineExceeded (the block is reported per block). The kernel cancels
  // I/O still queued; I/O the device has already started ends only when the
  // device answers or the block layer's own timeout fires. A request waiting
  // for one of the queue_depth slots fails ("never issued") only after
  // (2 + k / queue_depth) times this, k being the requests ahead of it.
  uint32_t io_timeout_ms = 1000;
  // Requests in flight in the kernel at once (the io_uring queue depth).
  uint32_t queue_depth = 64;
  // Requests accepted but not yet in flight; more fail with Busy.
  uint32_t max_queued = 4096;
  // RocksDB directory of the persistent index; empty: "<path>.index".
  std::string index_path;
  // What to do with a store written with another format, block size,
  // region size, region count (capacity / region size: a changed capacity
  // is a mismatch too) or namespace: "refuse" (open fails, naming the
  // difference) or "wipe". The same holds for a data file or device that
  // already holds bytes but has no index beside it (another program's, or a
  // store whose index was deleted): "wipe" lets the tier write over it.
  std::string on_mismatch = "refuse";
  // The namespace (NamespaceId::value of the served model) the store is
  // bound to; a store bound to another one is a mismatch. 0: unbound (opens
  // any store). An unbound store, such as one written before namespaces were
  // recorded, is bound by the first open that names one.
  uint64_t store_namespace = 0;
  // Which sealed region reclaim rewrites when no region is free: "fifo"
  // (oldest first) or "greedy" (fewest live bytes first).
  std::string reclaim = "fifo";
  // Open the data file with O_DIRECT. Where the file system refuses it
  // (tmpfs) the tier falls back to buffered I/O and logs a warning once.
  bool direct_io = true;
  // Index group commit: after this many written blocks the data file is
  // fdatasync'ed and the pending index entries are written to RocksDB. A
  // crash loses at most the blocks not yet committed. Also at region seal
  // and shutdown.
  uint32_t commit_every_blocks = 64;
  // And at the latest this long after a block was written: a tier written
  // slowly does not keep its last blocks out of the index (a crash loses at
  // most this much time's writes).
  uint32_t commit_interval_ms = 1000;
  // Reinsertion on reclaim. 0 (default): reclaim rewrites every live block
  // of its victim region (pure compaction; the runtime decides evictions).
  // N > 0: only blocks read at least N times since they were written or last
  // rewritten are rewritten; colder ones are evicted (a later read misses).
  uint32_t reinsert_hits = 0;

  // Checks the fields above; called by TierOptions::Validate for type nvme.
  Status Validate() const {
    if (io_timeout_ms == 0) return Status::InvalidArgument("nvme.io_timeout_ms must be > 0");
    if (queue_depth == 0 || queue_depth > 4096) {
      return Status::InvalidArgument("nvme.queue_depth must be in [1, 4096]");
    }
    if (max_queued == 0) return Status::InvalidArgument("nvme.max_queued must be > 0");
    if (on_mismatch != "refuse" && on_mismatch != "wipe") {
      return Status::InvalidArgument("nvme.on_mismatch is '" + on_mismatch +
                                     "'; expected one of: refuse, wipe");
    }
    if (reclaim != "fifo" && reclaim != "greedy") {
      return Status::InvalidArgument("nvme.reclaim is '" + reclaim +
                                     "'; expected one of: fifo, greedy");
    }
    if (commit_every_blocks == 0) {
      return Status::InvalidArgument("nvme.commit_every_blocks must be > 0");
    }
    if (commit_interval_ms == 0) {
      return Status::InvalidArgument("nvme.commit_interval_ms must be > 0");
    }
    return Status::Ok();
  }
};

}  // namespace kvtier
