// The NVMe tier's reclaim: picks a victim region, rewrites the live blocks
// worth keeping into the spare region, and makes the victim the new spare.
#include <algorithm>
#include <cstring>
#include <future>

#include "kvtier/block_header.h"
#include "tiers/nvme/nvme_state.h"

namespace kvtier::internal {

// Regions still being written are passed over when another will do: their
// live bytes are not counted yet, and reclaim would wait for them.
int NvmeTier::State::PickVictimLocked() const {
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
    const bool better =
        options.nvme.reclaim == "greedy"
            ? (r.live_bytes < b.live_bytes || (r.live_bytes == b.live_bytes && r.order < b.order))
            : r.order < b.order;
    if (better) best = static_cast<int>(i);
  }
  return best;
}

Status NvmeTier::State::SyncIo(IoOp op, uint64_t offset, std::span<std::byte> buf) {
  std::promise<IoCompletion> p;
  auto f = p.get_future();
  std::vector<IoRequest> reqs(1);
  reqs[0].op = op;
  reqs[0].fd = file.fd();
  reqs[0].offset = offset;
  if (!buf.empty()) reqs[0].iov.push_back({buf.data(), buf.size()});
  reqs[0].done = [&p](const IoCompletion& c) { p.set_value(c); };
  KVTIER_RETURN_IF_ERROR(engine->Submit(std::move(reqs)));
  return f.get().status;
}

// Frees the victim region picked by the reclaim policy: its live blocks are
// rewritten into the spare region (which becomes the active one), except,
// with nvme.reinsert_hits > 0, the cold ones, which are evicted. The victim
// becomes the spare, or a free region when nothing was rewritten.
Status NvmeTier::State::Reclaim() {
  std::lock_guard reclaim_lock(reclaim_mu);
  std::vector<LiveBlock> live;
  int victim = -1;
  {
    std::unique_lock lock(mu);
    if (FreeRegionLocked() >= 0) return Status::Ok();  // another writer reclaimed
    victim = PickVictimLocked();
    if (victim < 0 || spare < 0) return Status::ResourceExhausted("no region to reclaim");
    Region& v = regions[victim];
    v.state = RegionState::kReclaiming;
    cv.wait(lock, [&] { return v.writers == 0; });
    for (const auto& [id, e] : map) {
      if (e.loc.region == static_cast<uint32_t>(victim)) live.push_back({id, e});
    }
  }
  uint64_t reinserted = 0;
  KVTIER_RETURN_IF_ERROR(Relocate(victim, live, &reinserted));
  return reinserted > 0 ? CommitNow() : Status::Ok();
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
  KVTIER_RETURN_IF_ERROR(SyncIo(IoOp::kRead, uint64_t(victim) * region_bytes, buf.span()));
  for (LiveBlock& b : live) {
    if (b.fate == LiveBlock::kEvict) continue;
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

// Writes the packed blocks at the start of the spare region, which becomes
// the active region first (its new generation durable before the data).
Status NvmeTier::State::WritePacked(const AlignedBuffer& buf, uint64_t packed, int* target,
                                    uint64_t* gen) {
  std::unique_lock lock(mu);
  const int t = spare;
  KVTIER_RETURN_IF_ERROR(ActivateLocked(t));
  spare = -1;
  *target = t;
  *gen = regions[t].generation;
  regions[t].write_ptr = packed;
  ++regions[t].writers;
  lock.unlock();
  Status st = SyncIo(IoOp::kWrite, uint64_t(t) * region_bytes, buf.span().first(packed));
  lock.lock();
  --regions[t].writers;
  if (st.ok()) stats.device_bytes_written += packed;
  return st;
}

Status NvmeTier::State::Relocate(int victim, std::vector<LiveBlock>& live, uint64_t* reinserted) {
  AlignedBuffer buf;
  uint64_t packed = 0;
  int target = -1;
  uint64_t gen = 0;
  Status st = PackLive(victim, live, buf, &packed);
  if (st.ok() && packed > 0) st = WritePacked(buf, packed, &target, &gen);
  std::unique_lock lock(mu);
  if (!st.ok() && log) {
    log->Log(LogLevel::kError, "nvme tier '" + name + "': reclaim of region " +
                                   std::to_string(victim) +
                                   " lost its live blocks: " + st.ToString());
  }
  *reinserted = InstallRelocatedLocked(victim, target, gen, st, live);
  Region& v = regions[victim];
  cv.wait(lock, [&] { return v.readers == 0; });
  stats.bytes_reclaimed += v.write_ptr - std::min(v.write_ptr, packed);
  ++stats.reclaims;
  v = Region{};
  if (target >= 0 || spare < 0) spare = victim;
  return Status::Ok();
}

// Points the index at the rewritten copies; drops what was evicted, failed
// its check or could not be moved. Blocks replaced or removed meanwhile are
// left alone. Returns the blocks rewritten. REQUIRES: mu held.
uint64_t NvmeTier::State::InstallRelocatedLocked(int victim, int target, uint64_t gen,
                                                 const Status& st,
                                                 const std::vector<LiveBlock>& live) {
  uint64_t moved_blocks = 0;
  for (const LiveBlock& b : live) {
    auto it = map.find(b.id);
    if (it == map.end() || it->second.loc.region != static_cast<uint32_t>(victim) ||
        it->second.seq != b.entry.seq) {
      continue;
    }
    const uint64_t disk = DiskBytes(it->second.loc.payload_bytes);
    if (!st.ok() || b.fate != LiveBlock::kKeep) {
      if (st.ok() && b.fate == LiveBlock::kCorrupt) ++stats.corruptions;
      if (b.fate == LiveBlock::kEvict) {
        ++stats.evicted_blocks;
        stats.bytes_evicted += disk;
      }
      DropLocked(it->first, it->second, true);
      map.erase(it);
      continue;
    }
    BlockLocation moved = it->second.loc;
    moved.region = static_cast<uint32_t>(target);
    moved.offset = b.new_offset;
    moved.generation = gen;
    it->second.loc = moved;
    it->second.hits = 0;  // hot again only if read again
    pending[it->first] = moved;
    regions[victim].live_bytes -= disk;
    regions[target].live_bytes += disk;
    stats.bytes_reinserted += disk;
    ++stats.reinserted_blocks;
    ++moved_blocks;
  }
  return moved_blocks;
}

}  // namespace kvtier::internal
