// The NVMe tier: blocks in a log-structured data file (or block device) on
// io_uring, located through a RocksDB index that survives restarts.
//
// Layout: the file is a row of equal regions (TierOptions::region_bytes).
// Writes append to the active region; a full region is sealed. When no
// region is free, reclaim picks a sealed region (nvme.reclaim: fifo or
// greedy), rewrites its live blocks into the spare region, and the victim
// becomes the new spare. With nvme.reinsert_hits = N > 0 only blocks read at
// least N times since they were written (or last rewritten) are rewritten;
// the cold rest are evicted. Removed and replaced blocks are dead space until
// then. Capacity is logical (payload bytes, TierOptions::capacity_bytes); the
// file is sized with spare regions so reclaim always has room.
//
// Durability: a Write completes once its bytes are on the device and the
// block is readable. Index entries are group-committed by a committer
// thread: fdatasync of the data file, then one RocksDB batch with its WAL
// synced, so the index never points at data that is not durable, and a
// commit (Flush's too) survives a power loss. A region's new generation is
// written (synced) before any data lands in it, and entries whose generation
// differs from their region's are dropped on open. A crash loses at most
// the blocks written since the last commit (nvme.commit_every_blocks, and
// at most nvme.commit_interval_ms ago).
//
// Restart: every indexed block is recovered, but starts unclaimed: the
// runtime above knows of it only once a lookup adopts it (and says so with
// Tier::Claim), and can evict only what it knows. Until this run claims it,
// reads it (successfully), rewrites it or removes it, an unclaimed block
// is left out of Usage() (it is free space to the caller), and a write that
// finds the tier full drops unclaimed blocks, oldest first, before it
// answers ResourceExhausted; their deletes reach RocksDB with the next group
// commit.
//
// Reads go straight into the caller's buffer when it is 4 KiB-aligned and
// the payload is a multiple of 4 KiB (host hub slots), else through a bounce
// buffer. Every read checks the header and payload checksum; a mismatch is
// Corruption and the entry is dropped. Memory announced with
// RegisterHostMemory (the hub arena) becomes io_uring fixed buffers as far as
// the locked-memory limit allows; a payload inside it moves with
// READ_FIXED/WRITE_FIXED as its own request beside the header page's, any
// other buffer as one vectored request. The data file is a fixed file.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "io/io_engine.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

struct NvmeStats {
  uint64_t host_bytes_written = 0;    // payload bytes of writes that completed
  uint64_t device_bytes_written = 0;  // every byte written to the data file
  uint64_t bytes_reclaimed = 0;       // dead bytes freed by reclaim
  uint64_t bytes_reinserted = 0;      // live bytes rewritten by reclaim
  uint64_t reinserted_blocks = 0;     // live blocks rewritten by reclaim
  uint64_t evicted_blocks = 0;        // cold live blocks reclaim dropped (reinsert_hits)
  uint64_t bytes_evicted = 0;         // their disk bytes
  uint64_t reclaims = 0;
  uint64_t index_commits = 0;  // group commits that wrote entries
  uint64_t commit_failures = 0;
  uint64_t recovered_blocks = 0;   // entries loaded at open
  uint64_t dropped_on_open = 0;    // stale or malformed entries dropped at open
  uint64_t unclaimed_dropped = 0;  // recovered blocks never used, dropped to make room
  uint64_t corruptions = 0;        // reads that failed their checks
  uint64_t unreadable_blocks = 0;  // live blocks reclaim could not read back (dropped)
  bool direct_io = false;          // false: buffered fallback (tmpfs)
  bool fixed_file = false;         // the data file is registered with the ring
  uint64_t registered_bytes = 0;   // host memory registered as fixed buffers
  uint64_t fixed_buffer_ios = 0;   // reads and writes that used them
  uint32_t regions = 0;
  uint32_t free_regions = 0;
  // Device bytes per admitted byte; 0 before any write.
  double WriteAmplification() const {
    return host_bytes_written == 0 ? 0.0
                                   : static_cast<double>(device_bytes_written) /
                                         static_cast<double>(host_bytes_written);
  }
};

// OpenNvmeTier's result. Public methods beyond Tier are thread-safe.
class NvmeTier final : public Tier {
 public:
  struct State;  // the insides (tiers/nvme/nvme_state.h)

  ~NvmeTier() override;
  TierUsage Usage() const override;
  NvmeStats Stats() const;
  // Makes every completed write durable and indexed now.
  Status Flush();
  // How many times the group committer has woken to look for work.
  uint64_t TEST_CommitterWakeups() const;
  // Byte offset in the data file where the block's header page starts.
  std::optional<uint64_t> TEST_FileOffset(NamespaceId ns, const BlockKey& key) const;
  // Runs `hook` in every read after its index lookup, before its I/O is
  // built. REQUIRES: no read in flight.
  void TEST_SetAfterReadLookup(std::function<void()> hook);
  // Runs `hook` in every write right after its block's space is reserved,
  // before its I/O is built; it may throw std::bad_alloc to act as running
  // out of memory there. REQUIRES: no write in flight.
  void TEST_SetAfterWriteReserve(std::function<void()> hook);
  // Runs `hook` in every reclaim once it holds the reclaim lock, before it
  // looks at the regions; other writes may run in it. REQUIRES: no write
  // in flight.
  void TEST_SetBeforeReclaim(std::function<void()> hook);
  // Runs `hook` in every reclaim's scan of the index after its first part,
  // with the tier lock released: reads, lookups and removes may run in it.
  // REQUIRES: no write in flight.
  void TEST_SetDuringReclaimScan(std::function<void()> hook);
  // Reclaim reads and writes a region in requests of at most `bytes` (a
  // multiple of 4 KiB) instead of 4 MiB. REQUIRES: no write in flight.
  void TEST_SetReclaimIoChunk(uint64_t bytes);

 protected:
  void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) override;
  void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) override;
  void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override;
  void DoContains(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override;
  void DoClaim(NamespaceId ns, std::span<const BlockKey> keys) override;
  void DoShutdown() override;
  uint64_t DoRegisterHostMemory(std::span<std::byte> memory) override;

 private:
  friend Result<std::unique_ptr<NvmeTier>> OpenNvmeTier(const TierOptions&, const TierContext&,
                                                        std::unique_ptr<IoEngine>);
  NvmeTier(const TierOptions& options, std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// Opens (creating or recovering) the tier. `engine` null: an io_uring engine
// built from options.nvme. InvalidArgument for bad geometry or a store of
// another layout (unless on_mismatch is wipe); I/O errors as Status.
Result<std::unique_ptr<NvmeTier>> OpenNvmeTier(const TierOptions& options,
                                               const TierContext& context,
                                               std::unique_ptr<IoEngine> engine = nullptr);

// For the registry.
Result<std::unique_ptr<Tier>> NewNvmeTier(const TierOptions& options, const TierContext& context);

}  // namespace kvtier::internal
