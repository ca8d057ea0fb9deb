// The insides of NvmeTier, shared by nvme_read.cc (the read path),
// nvme_tier.cc (the write and remove paths), nvme_store.cc (open and
// recovery, region allocation, group commit) and nvme_reclaim.cc (reclaim).
// Not for use outside tiers/nvme.
//
// Locking: mu guards everything marked "guarded"; it is never held across a
// blocking I/O wait, only across the synced RocksDB write of a region's new
// generation. reclaim_mu serialises reclaims and is taken before mu.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/ns_key.h"
#include "io/io_engine.h"
#include "kvtier/tier.h"
#include "policy/sharded_map.h"
#include "tiers/nvme/nvme_file.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_index.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::internal {

enum class RegionState : uint8_t { kFree, kActive, kSealed, kReclaiming };

struct Region {
  RegionState state = RegionState::kFree;
  uint64_t generation = 0;  // 0: never written
  uint64_t write_ptr = 0;   // bytes handed out
  uint64_t live_bytes = 0;  // disk bytes of indexed blocks
  uint32_t readers = 0;     // reads in flight
  uint32_t writers = 0;     // writes in flight
  uint64_t order = 0;       // when it became active; FIFO reclaim order
  // Until then (steady clock, ns) it is picked for reclaim only when no
  // other region will do: its blocks failed to read (not for a full queue)
  // at its last reclaim.
  uint64_t reclaim_again_ns = 0;
};

struct Entry {
  BlockLocation loc;
  uint64_t seq = 0;   // write sequence; a later write wins
  uint32_t hits = 0;  // reads served since written or last reinserted
  // Recovered at open and not yet claimed, read, rewritten or removed in
  // this run: no one above the tier is known to hold it, so Usage leaves it
  // out and Reserve drops it to make room.
  bool unclaimed = false;
};

// A block of a region being reclaimed, and what becomes of it.
struct LiveBlock {
  enum Fate : uint8_t { kCorrupt, kKeep, kEvict, kUnreadable };
  NsKey id;
  Entry entry;              // as indexed when the reclaim began
  Fate fate = kCorrupt;     // kCorrupt until its bytes verify; kUnreadable: I/O error
  uint32_t new_offset = 0;  // in the target region, when kept
};

// The largest request reclaim's reads and writes make (NvmeTier::State::SyncIo),
// unless one block is larger.
inline constexpr uint64_t kSyncIoChunkBytes = uint64_t{4} << 20;

// Where a new block goes.
struct Placement {
  BlockLocation loc;
  uint64_t seq = 0;
};

struct NvmeTier::State {
  // A state its tier never took over (building the tier threw) still stops
  // its committer: a joinable thread destroyed ends the process.
  ~State() {
    if (committer.joinable()) Close();
  }

  std::string name;
  TierOptions options;
  uint64_t block_bytes = 0;
  uint64_t region_bytes = 0;
  // The largest request SyncIo makes: 4 MiB, or one block's disk bytes
  // when larger. Set at open (tests may lower it before any write).
  uint64_t sync_io_chunk = 0;
  // Where a block's header starts in the file.
  uint64_t FileOffset(const BlockLocation& loc) const {
    return uint64_t{loc.region} * region_bytes + loc.offset;
  }
  uint64_t disk_budget = 0;  // disk bytes of live blocks the capacity allows
  std::shared_ptr<LogSink> log;
  // TierContext::copies_lost: told of the blocks reclaim drops (cold ones
  // evicted, ones that fail their check or cannot be read), which the
  // runtime still indexes here. May be empty.
  std::function<void(NamespaceId, std::span<const BlockKey>)> copies_lost;
  DataFile file;
  std::unique_ptr<NvmeIndex> index;
  std::unique_ptr<IoEngine> engine;
  // Tests only: runs in DoRead after the index lookup has released `mu`,
  // before the read's requests are built. Set before any read.
  std::function<void()> after_read_lookup;
  // Tests only: runs in DoWrite right after a block's Reserve, before its
  // I/O is built; may throw std::bad_alloc. Set before any write.
  std::function<void()> after_write_reserve;
  // Tests only: runs in Reclaim once reclaim_mu is held, before `mu` is
  // taken. Set before any write.
  std::function<void()> before_reclaim;
  // Tests only: runs in Reclaim's index scan after its first shard, with
  // `mu` released. Set before any write.
  std::function<void()> during_reclaim_scan;

  mutable std::mutex mu;
  // Two condition variables, so that the committer, which waits on
  // commit_cv, is not woken each time a read or write drops its region pin.
  std::condition_variable pin_cv;     // a region's readers or writers fell to 0
  std::condition_variable commit_cv;  // a commit requested, done, or the committer stopped
  uint64_t committer_wakeups = 0;     // guarded; times the committer checked for work
  std::vector<Region> regions;        // guarded
  // Sharded: writes and lookups take `mu` while it grows (policy/sharded_map.h).
  ShardedMap<NsKey, Entry, NsKeyHash> map;                                     // guarded
  std::unordered_map<NsKey, uint32_t, NsKeyHash> writing;                      // guarded
  std::unordered_map<NsKey, uint64_t, NsKeyHash> tombstones;                   // guarded
  std::unordered_map<NsKey, std::optional<BlockLocation>, NsKeyHash> pending;  // guarded
  uint64_t seq = 0;                                                            // guarded
  uint64_t next_generation = 1;                                                // guarded
  uint64_t next_order = 1;                                                     // guarded
  int active = -1;                                                             // guarded
  int spare = -1;  // guarded: reclaim's target
  // The spare is a victim whose moved blocks' new entries no commit has
  // written yet: the index still points into it, so it may not be written
  // over (nor get a new generation) until a commit succeeds. Read and
  // written under reclaim_mu and mu.
  bool spare_moves_uncommitted = false;
  uint64_t used_payload = 0;   // guarded: indexed + in-flight payload bytes
  uint64_t live_disk = 0;      // guarded: indexed + in-flight disk bytes
  uint64_t since_commit = 0;   // guarded: blocks installed since the last commit
  std::vector<NsKey> lost_unreported;  // guarded: dropped by reclaim, for copies_lost
  NvmeStats stats;             // guarded
  WriteTotals totals_at_open;  // lifetime totals recorded before this open
  // Unclaimed entries (Entry::unclaimed): their payload bytes and count, and
  // their ids oldest first as recovered; ids claimed or gone since are skipped.
  uint64_t unclaimed_payload = 0;     // guarded
  uint64_t unclaimed_disk = 0;        // guarded
  uint64_t unclaimed_blocks = 0;      // guarded
  std::deque<NsKey> unclaimed_order;  // guarded

  bool commit_requested = false;  // guarded
  bool stop_committer = false;    // guarded
  uint64_t commits_started = 0;   // guarded
  uint64_t commits_done = 0;      // guarded
  Status last_commit;             // guarded
  std::thread committer;

  std::mutex reclaim_mu;

  // nvme_store.cc
  static Result<std::unique_ptr<State>> Open(const TierOptions& options, const TierContext& context,
                                             std::unique_ptr<IoEngine> engine);
  Status Recover();
  Status CheckHeadersSampled(const IndexEntries& kept);
  // Recover, and when the index proves damaged (Corruption) with
  // on_mismatch: wipe, a fresh index at `dir` and an empty store.
  Status RecoverOrWipe(const std::string& dir, const StoreMeta& meta);
  // The index at `dir` is damaged (`damage`): Corruption naming the fix, or
  // with on_mismatch: wipe a fresh one in `index`.
  Status ReplaceDamagedIndex(const std::string& dir, const StoreMeta& meta, const Status& damage);
  // Reserves room for a block of `payload` bytes of `id`; may reclaim.
  Result<Placement> Reserve(const NsKey& id, uint64_t payload, uint64_t checksum);
  // Drops an indexed entry's accounting. REQUIRES: mu held.
  void DropLocked(const NsKey& id, const Entry& e, bool record_delete);
  // Counts an unclaimed entry as used from now on. REQUIRES: mu held.
  void ClaimLocked(Entry& e);
  void RequestCommitLocked();
  Status CommitNow();
  void CommitLoop();
  void Close();

 private:
  Status ActivateLocked(int region);
  // Makes `region`, whose generation `gen` is durable, the active one.
  void MakeActiveLocked(int region, uint64_t gen);
  int FreeRegionLocked() const;
  int GiveUpEmptiestRegion(std::vector<IndexUpdate>& drops);
  // Makes room for a block of `payload` bytes of `id` within the capacity,
  // dropping unclaimed entries if that is enough; ResourceExhausted when
  // not. REQUIRES: mu held.
  Status MakeRoomLocked(const NsKey& id, uint64_t payload);
  // Drops the oldest unclaimed entry; false when there is none.
  bool DropOldestUnclaimedLocked();
  // Takes one unclaimed entry of `payload` bytes out of the totals.
  void UncountUnclaimedLocked(uint64_t payload);
  // nvme_reclaim.cc
  // Frees a region, unless one is free or the active region has room for
  // `disk` bytes by the time it may start. On error nothing was moved.
  Status Reclaim(uint64_t disk);
  // Tells copies_lost of lost_unreported, with no lock held.
  void ReportLostCopies();
  int PickVictimLocked(uint64_t now_ns) const;
  Status Relocate(int victim, std::vector<LiveBlock>& live, uint64_t* reinserted);
  // Commits, when the spare still holds what the index knows of blocks moved
  // out of it; an error when that commit fails. REQUIRES: reclaim_mu held.
  Status CommitSpareMoves();
  Status PackLive(int victim, std::vector<LiveBlock>& live, AlignedBuffer& buf, uint64_t* packed);
  Status ReadLiveOneByOne(int victim, std::vector<LiveBlock>& live, AlignedBuffer& buf);
  Status WritePacked(const AlignedBuffer& buf, uint64_t packed, int* target, uint64_t* gen);
  uint64_t InstallRelocatedLocked(int victim, int target, uint64_t gen,
                                  const std::vector<LiveBlock>& live);
  // One read or write of `buf` at `offset` (or a sync), waited for. A span
  // longer than sync_io_chunk goes as requests of at most that, one after
  // another: each request has the device time of one block
  // (nvme.io_timeout_ms), and a region must move on any device that moves a
  // block in time.
  Status SyncIo(IoOp op, uint64_t offset, std::span<std::byte> buf);
  Status SyncIoOnce(IoOp op, uint64_t offset, std::span<std::byte> buf);
};

// One completion for a batch of I/Os: finishes when the last one is done.
struct BatchDone {
  explicit BatchDone(CompletionSource src) : done(std::move(src)) {}
  CompletionSource done;
  std::atomic<size_t> remaining{1};  // 1 for the submitter until it is done
  void Release() {
    if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) done.Finish();
  }
};

}  // namespace kvtier::internal
