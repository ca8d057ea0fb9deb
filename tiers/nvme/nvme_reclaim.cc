// The NVMe tier's reclaim: picks a victim region, rewrites the live blocks
// worth keeping into the spare region, and makes the victim the new spare.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <new>

#include "kvtier/block_header.h"
#include "tiers/nvme/nvme_block_io.h"
#include "tiers/nvme/nvme_state.h"

namespace kvtier::internal {
namespace {

// How long a region whose blocks failed to read at its reclaim is passed
// over while another region can be reclaimed instead.
constexpr uint64_t kUnreadableVictimPauseNs = 10'000'000'000;

uint64_t SteadyNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

// Regions still being written are passed over when another will do: their
// live bytes are not counted yet, and reclaim would wait for them. So are,
// for a while, those whose blocks failed to read at their last reclaim: a
// region that cannot be read would otherwise be picked again and again, and
// no write would find room.
int NvmeTier::State::PickVictimLocked(uint64_t now_ns) const {
  int best = -1;
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    if (r.state != RegionState::kSealed) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const Region& b = regions[best];
    if ((r.writers == 0) != (b.writers == 0)) {
      if (r.writers == 0) best = static_cast<int>(i);
      continue;
    }
    const bool r_due = r.reclaim_again_ns <= now_ns, b_due = b.reclaim_again_ns <= now_ns;
    if (r_due != b_due) {
      if (r_due) best = static_cast<int>(i);
      continue;
    }
    const bool better =
        options.nvme.reclaim == "greedy"
            ? (r.live_bytes < b.live_bytes || (r.live_bytes == b.live_bytes && r.order < b.order))
            : r.order < b.order;
    if (better) best = static_cast<int>(i);
  }
  return best;
}

Status NvmeTier::State::SyncIo(IoOp op, uint64_t offset, std::span<std::byte> buf) {
  if (op == IoOp::kFsync || buf.size() <= sync_io_chunk) return SyncIoOnce(op, offset, buf);
  for (uint64_t at = 0; at < buf.size(); at += sync_io_chunk) {
    const uint64_t n = std::min<uint64_t>(sync_io_chunk, buf.size() - at);
    KVTIER_RETURN_IF_ERROR(SyncIoOnce(op, offset + at, buf.subspan(at, n)));
  }
  return Status::Ok();
}

Status NvmeTier::State::SyncIoOnce(IoOp op, uint64_t offset, std::span<std::byte> buf) {
  std::promise<IoCompletion> p;
  auto f = p.get_future();
  std::vector<IoRequest> reqs(1);
  reqs[0].op = op;
  reqs[0].fd = file.fd();
  reqs[0].offset = offset;
  if (!buf.empty()) reqs[0].iov.push_back({buf.data(), buf.size()});
  reqs[0].done = [&p](const IoCompletion& c) { p.set_value(c); };
  KVTIER_RETURN_IF_ERROR(SubmitWhenRoom(*engine, reqs, options.nvme.io_timeout_ms));
  return CompletionStatus(op, offset, buf.size(), f.get());
}

// Frees the victim region picked by the reclaim policy: its live blocks are
// rewritten into the spare region (which becomes the active one), except,
// with nvme.reinsert_hits > 0, the cold ones, which are evicted. The victim
// becomes the spare, or a free region when nothing was rewritten. Blocks
// that fail their check or cannot be read are dropped; any other failure
// (queue full, deadline, a failed write) moves nothing: the victim keeps its
// blocks and the error is returned.
Status NvmeTier::State::Reclaim(uint64_t disk) {
  std::lock_guard reclaim_lock(reclaim_mu);
  if (before_reclaim) before_reclaim();
  std::vector<LiveBlock> live;
  int victim = -1;
  {
    std::unique_lock lock(mu);
    // Another writer made room meanwhile.
    if (FreeRegionLocked() >= 0 ||
        (active >= 0 && regions[active].write_ptr + disk <= region_bytes)) {
      return Status::Ok();
    }
    victim = PickVictimLocked(SteadyNowNs());
    if (victim < 0 || spare < 0) return Status::ResourceExhausted("no region to reclaim");
    Region& v = regions[victim];
    v.state = RegionState::kReclaiming;
    pin_cv.wait(lock, [&] { return v.writers == 0; });
  }
  // The index is scanned one shard at a time, taking mu for each: scanning
  // millions of entries at once would hold every read, write and lookup of
  // the tier meanwhile. Between shards nothing enters the victim (no writer
  // is in it, and only this reclaim moves blocks); entries that leave it or
  // change are skipped by InstallRelocatedLocked, as after Relocate's reads.
  try {
    for (size_t shard = 0; shard < map.kShards; ++shard) {
      {
        std::lock_guard lock(mu);
        map.ForEachIn(shard, [&](const NsKey& id, const Entry& e) {
          if (e.loc.region == static_cast<uint32_t>(victim)) live.push_back({id, e});
        });
      }
      if (shard == 0 && during_reclaim_scan) during_reclaim_scan();
    }
  } catch (const std::bad_alloc&) {
    // The victim is taken back, or it would stay reclaiming for good.
    std::lock_guard lock(mu);
    regions[victim].state = RegionState::kSealed;
    return Status::ResourceExhausted("no memory to list the blocks of region " +
                                     std::to_string(victim));
  }
  uint64_t reinserted = 0;
  KVTIER_RETURN_IF_ERROR(Relocate(victim, live, &reinserted));
  return reinserted > 0 ? CommitSpareMoves() : Status::Ok();
}

void NvmeTier::State::ReportLostCopies() {
  std::vector<NsKey> lost;
  {
    std::lock_guard lock(mu);
    lost.swap(lost_unreported);
  }
  if (lost.empty() || !copies_lost) return;
  // One call per namespace.
  std::sort(lost.begin(), lost.end(),
            [](const NsKey& a, const NsKey& b) { return a.ns.value < b.ns.value; });
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < lost.size(); ++i) {
    keys.push_back(lost[i].key);
    if (i + 1 == lost.size() || !(lost[i + 1].ns == lost[i].ns)) {
      copies_lost(lost[i].ns, keys);
      keys.clear();
    }
  }
}

// A failed commit leaves the moves pending, and the index pointing at the
// old copies in the spare; writing over the spare (after durably giving it
// a new generation) would orphan those entries, and a crash would lose
// blocks a Flush had reported durable. So the spare stays unused until a
// commit succeeds: retried here before every reuse, the reclaim refused
// while it fails.
Status NvmeTier::State::CommitSpareMoves() {
  {
    std::lock_guard lock(mu);
    if (!spare_moves_uncommitted) return Status::Ok();
  }
  Status st = CommitNow();
  if (!st.ok()) {
    return st.WithContext("blocks moved out of the spare region are not committed");
  }
  std::lock_guard lock(mu);
  spare_moves_uncommitted = false;
  return Status::Ok();
}

// Reads the victim's blocks worth keeping and packs those that still verify
// to the front of `buf` (offsets only move down, so memmove in offset order
// never overwrites a source). Sets each block's fate and new offset. Recovery
// keeps no overlapping entries; should one still start before the bytes
// packed so far or end past the buffer, it is taken as corrupt, not read.
Status NvmeTier::State::PackLive(int victim, std::vector<LiveBlock>& live, AlignedBuffer& buf,
                                 uint64_t* packed) {
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a.entry.loc.offset < b.entry.loc.offset; });
  const uint32_t hot = options.nvme.reinsert_hits;
  uint64_t end = 0;
  for (LiveBlock& b : live) {
    b.fate = hot == 0 || b.entry.hits >= hot ? LiveBlock::kCorrupt : LiveBlock::kEvict;
    if (b.fate == LiveBlock::kCorrupt)
      end = std::max(end, b.entry.loc.offset + DiskBytes(b.entry.loc.payload_bytes));
  }
  *packed = 0;
  if (end == 0) return Status::Ok();  // nothing to keep: no read
  buf = AlignedBuffer(end);
  Status st = SyncIo(IoOp::kRead, uint64_t(victim) * region_bytes, buf.span());
  if (st.code() == StatusCode::kIOError) {
    if (log) {
      log->Log(LogLevel::kWarning, "nvme tier '" + name + "': reclaim of region " +
                                       std::to_string(victim) +
                                       " reads its blocks one by one: " + st.ToString());
    }
    st = ReadLiveOneByOne(victim, live, buf);
  }
  KVTIER_RETURN_IF_ERROR(st);
  for (LiveBlock& b : live) {
    if (b.fate != LiveBlock::kCorrupt) continue;
    const BlockLocation& loc = b.entry.loc;
    const uint64_t disk = DiskBytes(loc.payload_bytes);
    if (loc.offset < *packed || loc.offset + disk > buf.size()) continue;  // stays kCorrupt
    std::span<const std::byte> image(buf.data() + loc.offset, disk);
    Result<BlockHeader> h = DecodeBlockHeader(image.first(kBlockHeaderBytes));
    if (!h.ok() || h->payload_checksum != loc.checksum ||
        !VerifyBlock(*h, b.id.ns, b.id.key, image.subspan(kNvmeAlign, loc.payload_bytes)).ok()) {
      continue;  // stays kCorrupt
    }
    std::memmove(buf.data() + *packed, image.data(), disk);
    b.new_offset = static_cast<uint32_t>(*packed);
    b.fate = LiveBlock::kKeep;
    *packed += disk;
  }
  return Status::Ok();
}

// After the victim's span failed to read as a whole (an I/O error, such as
// one bad sector): reads each block worth keeping by itself, so that only
// those that cannot be read are lost (kUnreadable). A failure that is no I/O
// error (queue full, deadline) is returned: the reclaim then gives up.
Status NvmeTier::State::ReadLiveOneByOne(int victim, std::vector<LiveBlock>& live,
                                         AlignedBuffer& buf) {
  for (LiveBlock& b : live) {
    if (b.fate != LiveBlock::kCorrupt) continue;
    const BlockLocation& loc = b.entry.loc;
    std::span<std::byte> image = buf.span().subspan(loc.offset, DiskBytes(loc.payload_bytes));
    Status st = SyncIo(IoOp::kRead, uint64_t(victim) * region_bytes + loc.offset, image);
    if (st.code() == StatusCode::kIOError) {
      b.fate = LiveBlock::kUnreadable;
      if (log) {
        log->Log(LogLevel::kError, "nvme tier '" + name + "': reclaim drops block " +
                                       ToHex(b.id.key) + " of region " + std::to_string(victim) +
                                       ": " + st.ToString());
      }
      continue;
    }
    KVTIER_RETURN_IF_ERROR(st);
  }
  return Status::Ok();
}

// Writes the packed blocks at the start of the spare region. Its new
// generation is durable before the data lands, but it becomes the active
// region only once the data is there: nothing else is placed in it
// meanwhile, so after a failed write it is still an empty spare.
Status NvmeTier::State::WritePacked(const AlignedBuffer& buf, uint64_t packed, int* target,
                                    uint64_t* gen) {
  KVTIER_RETURN_IF_ERROR(CommitSpareMoves());
  std::unique_lock lock(mu);
  const int t = spare;
  const uint64_t g = next_generation++;
  KVTIER_RETURN_IF_ERROR(index->SetGeneration(static_cast<uint32_t>(t), g));
  lock.unlock();
  Status st = SyncIo(IoOp::kWrite, uint64_t(t) * region_bytes, buf.span().first(packed));
  lock.lock();
  if (!st.ok()) return st;
  stats.device_bytes_written += packed;
  MakeActiveLocked(t, g);
  spare = -1;
  regions[t].write_ptr = packed;
  *target = t;
  *gen = g;
  return Status::Ok();
}

Status NvmeTier::State::Relocate(int victim, std::vector<LiveBlock>& live, uint64_t* reinserted) {
  AlignedBuffer buf;
  uint64_t packed = 0;
  int target = -1;
  uint64_t gen = 0;
  Status st;
  // WritePacked changes nothing until its write has landed, and allocates
  // nothing after that.
  // The victim's blocks failed to read: an I/O error, or a read that timed
  // out (not a full queue or memory running out, which are no fault of it).
  bool unreadable = false;
  try {
    st = PackLive(victim, live, buf, &packed);
    unreadable = st.code() == StatusCode::kIOError || st.code() == StatusCode::kDeadlineExceeded;
    if (st.ok() && packed > 0) st = WritePacked(buf, packed, &target, &gen);
  } catch (const std::bad_alloc&) {
    st = Status::ResourceExhausted("out of memory for the live blocks");
  }
  std::unique_lock lock(mu);
  Region& v = regions[victim];
  if (!st.ok()) {
    // Nothing moved and the spare is still empty: the victim keeps its
    // blocks, and the write that needed the space fails instead.
    v.state = RegionState::kSealed;
    if (unreadable) v.reclaim_again_ns = SteadyNowNs() + kUnreadableVictimPauseNs;
    st = st.WithContext("region " + std::to_string(victim) + " kept its blocks");
    if (log) log->Log(LogLevel::kWarning, "nvme tier '" + name + "': reclaim: " + st.ToString());
    return st;
  }
  *reinserted = InstallRelocatedLocked(victim, target, gen, live);
  pin_cv.wait(lock, [&] { return v.readers == 0; });
  stats.bytes_reclaimed += v.write_ptr - std::min(v.write_ptr, packed);
  ++stats.reclaims;
  v = Region{};
  if (target >= 0 || spare < 0) {
    spare = victim;
    spare_moves_uncommitted = *reinserted > 0;
  }
  return Status::Ok();
}

// Points the index at the rewritten copies; drops what was evicted, failed
// its check or could not be read. Blocks replaced or removed meanwhile are
// left alone. Returns the blocks rewritten. REQUIRES: mu held.
//
// Throws nothing: the packed copies have landed and the spare is the active
// region by now, so every block must be settled. A block whose move cannot
// be recorded for RocksDB (memory) is dropped; one whose drop cannot be,
// keeps a row naming its old copy in the victim, which recovery takes while
// the victim still holds it and rejects by generation once the region is
// written again. A loss that cannot be queued for report surfaces as a miss
// on the block's next read.
uint64_t NvmeTier::State::InstallRelocatedLocked(int victim, int target, uint64_t gen,
                                                 const std::vector<LiveBlock>& live) {
  uint64_t moved_blocks = 0;
  for (const LiveBlock& b : live) {
    Entry* e = map.Find(b.id);
    if (e == nullptr || e->loc.region != static_cast<uint32_t>(victim) || e->seq != b.entry.seq) {
      continue;
    }
    const uint64_t disk = DiskBytes(e->loc.payload_bytes);
    BlockLocation moved = e->loc;
    moved.region = static_cast<uint32_t>(target);
    moved.offset = b.new_offset;
    moved.generation = gen;
    bool keep = b.fate == LiveBlock::kKeep;
    if (keep) {
      try {
        pending[b.id] = moved;
      } catch (const std::bad_alloc&) {
        // The move cannot be recorded for RocksDB: a commit would leave the
        // block's row naming the victim, rewritten once it is the spare, so
        // a Flush could not vouch for it. It is dropped instead, as lost.
        keep = false;
      }
    }
    if (!keep) {
      if (b.fate == LiveBlock::kCorrupt) ++stats.corruptions;
      if (b.fate == LiveBlock::kUnreadable) ++stats.unreadable_blocks;
      if (b.fate == LiveBlock::kEvict) {
        ++stats.evicted_blocks;
        stats.bytes_evicted += disk;
      }
      try {
        DropLocked(b.id, *e, true);
      } catch (const std::bad_alloc&) {  // it threw before changing anything
        DropLocked(b.id, *e, false);
      }
      map.Erase(b.id);
      try {
        lost_unreported.push_back(b.id);
      } catch (const std::bad_alloc&) {
      }
      continue;
    }
    e->loc = moved;
    e->hits = 0;  // hot again only if read again
    regions[victim].live_bytes -= disk;
    regions[target].live_bytes += disk;
    stats.bytes_reinserted += disk;
    ++stats.reinserted_blocks;
    ++moved_blocks;
  }
  return moved_blocks;
}

}  // namespace kvtier::internal
