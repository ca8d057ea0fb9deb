// The NVMe tier's space and durability: open and recovery, region
// allocation, and the group-commit thread. Reclaim is in nvme_reclaim.cc.
#include <algorithm>
#include <chrono>
#include <new>

#include "tiers/nvme/nvme_block_io.h"
#include "tiers/nvme/nvme_state.h"

namespace kvtier::internal {
namespace {

// Geometry: regions for the capacity plus spare ones, so that reclaim always
// finds dead space to gain (about 1/16 extra) and a target to write into.
struct Geometry {
  uint64_t disk_budget = 0;
  uint32_t regions = 0;
};

Result<Geometry> ComputeGeometry(const TierOptions& o, uint64_t block_bytes) {
  const uint64_t block_disk = DiskBytes(block_bytes);
  if (o.region_bytes % kNvmeAlign != 0 || o.region_bytes > (1ULL << 31)) {
    return Status::InvalidArgument("tier '" + o.name + "': region size " +
                                   std::to_string(o.region_bytes) +
                                   " must be a multiple of 4 KiB and at most 2 GiB");
  }
  if (o.region_bytes < block_disk) {
    return Status::InvalidArgument("tier '" + o.name + "': region size " +
                                   std::to_string(o.region_bytes) + " cannot hold one block (" +
                                   std::to_string(block_disk) + " bytes on disk)");
  }
  const uint64_t regions = NvmeRegionCount(o.capacity_bytes, block_bytes, o.region_bytes);
  if (regions > kMaxNvmeRegions) {
    return Status::InvalidArgument(
        "tier '" + o.name + "': capacity " + std::to_string(o.capacity_bytes) + " in regions of " +
        std::to_string(o.region_bytes) + " bytes makes " + std::to_string(regions) +
        " regions, more than " + std::to_string(kMaxNvmeRegions) + "; raise region_size");
  }
  const uint64_t blocks = (o.capacity_bytes + block_bytes - 1) / block_bytes;
  Geometry g;
  g.disk_budget = blocks * block_disk;
  g.regions = static_cast<uint32_t>(regions);
  return g;
}

using Recovered = IndexEntries;

}  // namespace

Result<std::unique_ptr<NvmeTier::State>> NvmeTier::State::Open(const TierOptions& options,
                                                               const TierContext& context,
                                                               std::unique_ptr<IoEngine> engine) {
  KVTIER_ASSIGN_OR_RETURN(Geometry g, ComputeGeometry(options, context.block_bytes));
  auto s = std::make_unique<State>();
  s->name = options.name;
  s->options = options;
  s->block_bytes = context.block_bytes;
  s->region_bytes = options.region_bytes;
  s->sync_io_chunk = std::max<uint64_t>(kSyncIoChunkBytes, DiskBytes(context.block_bytes));
  s->disk_budget = g.disk_budget;
  s->log = context.log;
  s->copies_lost = context.copies_lost;
  KVTIER_ASSIGN_OR_RETURN(s->file,
                          DataFile::Open(options.path, options.nvme.direct_io, s->log.get()));
  const std::string dir =
      options.nvme.index_path.empty() ? options.path + ".index" : options.nvme.index_path;
  StoreMeta meta{kNvmeFormatVersion, context.block_bytes, options.region_bytes, g.regions,
                 options.nvme.store_namespace};
  bool wiped = false;
  const DataFound found = s->file.created()      ? DataFound::kCreated
                          : s->file.holds_data() ? DataFound::kData
                                                 : DataFound::kBlank;
  Result<std::unique_ptr<NvmeIndex>> index =
      NvmeIndex::Open(dir, meta, options.nvme.on_mismatch == "wipe", found, s->log, &wiped);
  if (index.ok()) {
    s->index = std::move(index).value();
  } else if (index.status().code() == StatusCode::kCorruption) {
    KVTIER_RETURN_IF_ERROR(s->ReplaceDamagedIndex(dir, meta, index.status()));
  } else {
    s->file.RemoveIfMade();
    return index.status();
  }
  // Sized only once the index accepts the store: a refused one stays as it
  // was. A new file that cannot be sized (a full disk) is emptied again, so
  // that the layout just recorded does not refuse a retry with another one.
  if (Status st = s->file.Reserve(uint64_t{g.regions} * options.region_bytes, s->log.get());
      !st.ok()) {
    s->file.ForgetCreated();
    return st;
  }
  if (!engine) {
    // A block's requests are queued together: room for at least one block.
    UringEngineOptions eo{
        .queue_depth = options.nvme.queue_depth,
        .max_queued = std::max<uint32_t>(kMaxBlockRequests, options.nvme.max_queued),
        .timeout_ms = options.nvme.io_timeout_ms};
    KVTIER_ASSIGN_OR_RETURN(engine, NewUringEngine(eo));
  }
  s->engine = std::move(engine);
  // A fixed file saves a file-table lookup per I/O; an engine without fixed
  // files (a test decorator) does plain I/O.
  s->stats.fixed_file = s->engine->RegisterFile(s->file.fd()).ok();
  s->regions.resize(g.regions);
  s->stats.direct_io = s->file.direct();
  s->stats.regions = g.regions;
  KVTIER_RETURN_IF_ERROR(s->RecoverOrWipe(dir, meta));
  s->committer = std::thread([p = s.get()] { p->CommitLoop(); });
  return s;
}

// A damaged index (RocksDB finds a block of it failing its checksum, or
// files of it missing) lists blocks the tier cannot trust, and stays
// damaged: refused with the fix, or with on_mismatch: wipe discarded like a
// store of another layout, a fresh index in its place.
Status NvmeTier::State::ReplaceDamagedIndex(const std::string& dir, const StoreMeta& meta,
                                            const Status& damage) {
  const std::string what = "nvme store at " + options.path + ": its index is damaged (" +
                           std::string(damage.message()) + ")";
  if (options.nvme.on_mismatch != "wipe") {
    return Status::Corruption(what +
                              "; set 'on_mismatch: wipe' to discard the index and its blocks");
  }
  if (log) log->Log(LogLevel::kWarning, "tier '" + name + "': " + what + "; wiped");
  index.reset();
  KVTIER_RETURN_IF_ERROR(NvmeIndex::Destroy(dir, log));
  bool wiped = false;
  KVTIER_ASSIGN_OR_RETURN(index, NvmeIndex::Open(dir, meta, true, DataFound::kBlank, log, &wiped));
  return Status::Ok();
}

Status NvmeTier::State::RecoverOrWipe(const std::string& dir, const StoreMeta& meta) {
  const Status recovered = Recover();
  if (recovered.code() != StatusCode::kCorruption) return recovered;
  KVTIER_RETURN_IF_ERROR(ReplaceDamagedIndex(dir, meta, recovered));
  // The failed pass may have set region generations, or (when the index
  // failed only at its last write) indexed every block it found.
  for (Region& r : regions) r = Region{};
  map.EraseIf([](const NsKey&, const Entry&) { return true; });
  used_payload = live_disk = 0;
  unclaimed_payload = unclaimed_disk = unclaimed_blocks = 0;
  unclaimed_order.clear();
  next_generation = next_order = 1;
  spare = -1;
  return Recover();
}

// Rebuilds the in-memory index from RocksDB. Entries whose generation is not
// their region's (the region was reused after they were written) or that do
// not fit the geometry (or lie past the end of a truncated file) are
// dropped, and so are entries that overlap on disk.
// Every region holding a live block counts as sealed; the rest are free. Every
// recovered entry starts unclaimed (see Entry::unclaimed), queued oldest
// first: by its region's age, then offset.
Status NvmeTier::State::Recover() {
  KVTIER_ASSIGN_OR_RETURN(totals_at_open, index->ReadTotals());
  Recovered entries;
  uint64_t bad = 0;
  KVTIER_RETURN_IF_ERROR(index->Scan(
      [&](uint32_t r, uint64_t gen) {
        if (r < regions.size()) regions[r].generation = gen;
        next_generation = std::max(next_generation, gen + 1);
      },
      [&](const NsKey& id, const BlockLocation& loc) { entries.emplace_back(id, loc); }, &bad));
  std::vector<IndexUpdate> drops;
  Recovered kept;
  uint64_t cut_off = 0;
  for (auto& [id, loc] : entries) {
    const bool in_layout = LocationFits(loc, block_bytes, region_bytes, regions.size());
    // A block beyond the file's end was cut off by a truncation.
    const bool cut =
        in_layout && FileOffset(loc) + DiskBytes(loc.payload_bytes) > file.size_at_open();
    if (!in_layout || cut || loc.generation == 0 ||
        loc.generation != regions[loc.region].generation) {
      if (cut) ++cut_off;
      drops.push_back({id, std::nullopt});
      continue;
    }
    kept.emplace_back(id, loc);
  }
  if (cut_off > 0 && log) {
    log->Log(LogLevel::kWarning, "nvme: " + options.path + " was truncated to " +
                                     std::to_string(file.size_at_open()) +
                                     " bytes since the store last closed; " +
                                     std::to_string(cut_off) + " blocks past that were dropped");
  }
  DropOverlaps(kept, drops);
  KVTIER_RETURN_IF_ERROR(CheckHeadersSampled(kept));
  for (const auto& [id, loc] : kept) {
    Region& r = regions[loc.region];
    r.live_bytes += DiskBytes(loc.payload_bytes);
    used_payload += loc.payload_bytes;
    live_disk += DiskBytes(loc.payload_bytes);
    map[id] = Entry{.loc = loc, .unclaimed = true};
    unclaimed_payload += loc.payload_bytes;
    unclaimed_disk += DiskBytes(loc.payload_bytes);
    ++unclaimed_blocks;
  }
  // A region's generation is its age: regions are activated in generation order.
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second.generation, a.second.offset) <
           std::pair(b.second.generation, b.second.offset);
  });
  for (const auto& [id, loc] : kept) unclaimed_order.push_back(id);
  for (Region& r : regions) {
    if (r.live_bytes == 0) continue;
    r.state = RegionState::kSealed;
    r.write_ptr = region_bytes;
    r.order = r.generation;
  }
  next_order = next_generation;
  stats.recovered_blocks = map.size();
  stats.dropped_on_open = drops.size() + bad;
  spare = FreeRegionLocked();
  if (spare < 0) spare = GiveUpEmptiestRegion(drops);
  stats.free_regions =
      static_cast<uint32_t>(std::count_if(regions.begin(), regions.end(), [](const Region& r) {
        return r.state == RegionState::kFree;
      }));
  return index->Apply(drops);
}

// An index_path set to another store's index of the same layout would pass
// for this file's: each of its blocks would fail its check only when read.
// The header pages of a few blocks spread over the index are read; when
// every one read fails its check, the index does not describe this file
// (Corruption, which RecoverOrWipe refuses or wipes). A block whose read
// fails (an I/O error) proves nothing either way.
Status NvmeTier::State::CheckHeadersSampled(const IndexEntries& kept) {
  AlignedBuffer page(kNvmeAlign);
  const HeaderSample sample =
      SampleHeaders(kept, [&](const NsKey& id, const BlockLocation& loc) -> std::optional<Status> {
        if (!SyncIo(IoOp::kRead, FileOffset(loc), page.span()).ok()) return std::nullopt;
        return HeaderMatching(page.span(), id, loc).status();
      });
  if (!sample.Mismatched()) return Status::Ok();
  return Status::Corruption("none of " + std::to_string(sample.failed) +
                            " blocks sampled from it has its header in the data file (first: " +
                            std::string(sample.first.message()) +
                            "): it is another store's index, or the file was overwritten");
}

// Every region holds something (possible only after a crash left many
// partly filled regions): the emptiest one gives up its blocks and becomes
// the spare, so reclaim has a target.
int NvmeTier::State::GiveUpEmptiestRegion(std::vector<IndexUpdate>& drops) {
  int victim = 0;
  for (size_t i = 1; i < regions.size(); ++i) {
    if (regions[i].live_bytes < regions[victim].live_bytes) victim = static_cast<int>(i);
  }
  map.EraseIf([&](const NsKey& id, const Entry& e) {
    if (e.loc.region != static_cast<uint32_t>(victim)) return false;
    drops.push_back({id, std::nullopt});
    DropLocked(id, e, false);
    return true;
  });
  regions[victim] = Region{};
  return victim;
}

int NvmeTier::State::FreeRegionLocked() const {
  for (size_t i = 0; i < regions.size(); ++i) {
    if (regions[i].state == RegionState::kFree && static_cast<int>(i) != spare) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// A region's new generation is durable before any byte lands in it, so the
// entries of its previous life can never be taken for new ones.
Status NvmeTier::State::ActivateLocked(int r) {
  const uint64_t gen = next_generation++;
  KVTIER_RETURN_IF_ERROR(index->SetGeneration(static_cast<uint32_t>(r), gen));
  MakeActiveLocked(r, gen);
  return Status::Ok();
}

void NvmeTier::State::MakeActiveLocked(int r, uint64_t gen) {
  Region& reg = regions[r];
  reg = Region{};
  reg.state = RegionState::kActive;
  reg.generation = gen;
  reg.order = next_order++;
  if (active >= 0 && active != r) regions[active].state = RegionState::kSealed;
  active = r;
}

// Blocks recovered at open that this run never used give way first, but
// only when giving up all of them would make room: otherwise the write is
// refused and they stay.
Status NvmeTier::State::MakeRoomLocked(const NsKey& id, uint64_t payload) {
  const uint64_t disk = DiskBytes(payload);
  // Room when the entry `id` replaces (if any) and, with `all_unclaimed`,
  // every unclaimed entry besides it are gone.
  auto fits = [&](bool all_unclaimed) {
    uint64_t freed_payload = 0, freed_disk = 0;
    const Entry* replaced = map.Find(id);
    if (replaced != nullptr) {
      freed_payload = replaced->loc.payload_bytes;
      freed_disk = DiskBytes(freed_payload);
    }
    if (all_unclaimed) {
      const bool counted = replaced != nullptr && replaced->unclaimed;
      freed_payload += unclaimed_payload - (counted ? replaced->loc.payload_bytes : 0);
      freed_disk += unclaimed_disk - (counted ? DiskBytes(replaced->loc.payload_bytes) : 0);
    }
    return used_payload - freed_payload + payload <= options.capacity_bytes &&
           live_disk - freed_disk + disk <= disk_budget;
  };
  if (fits(false)) return Status::Ok();
  if (!fits(true)) {
    return Status::ResourceExhausted("tier '" + name + "' is full (" +
                                     std::to_string(used_payload) + " of " +
                                     std::to_string(options.capacity_bytes) + " bytes)");
  }
  while (!fits(false)) {
    if (!DropOldestUnclaimedLocked()) {
      return Status::Internal("tier '" + name +
                              "': unclaimed block totals exceed the unclaimed blocks found");
    }
  }
  return Status::Ok();
}

Result<Placement> NvmeTier::State::Reserve(const NsKey& id, uint64_t payload, uint64_t checksum) {
  const uint64_t disk = DiskBytes(payload);
  std::unique_lock lock(mu);
  for (size_t attempt = 0;; ++attempt) {
    // Checked again after every reclaim: other writes reserve meanwhile.
    KVTIER_RETURN_IF_ERROR(MakeRoomLocked(id, payload));
    if (active >= 0 && regions[active].write_ptr + disk <= region_bytes) break;
    if (int r = FreeRegionLocked(); r >= 0) {
      KVTIER_RETURN_IF_ERROR(ActivateLocked(r));
      RequestCommitLocked();  // a region was sealed: commit what it holds
      continue;
    }
    if (attempt > regions.size()) {
      return Status::ResourceExhausted("tier '" + name + "': no reclaimable space");
    }
    lock.unlock();
    Status st = Reclaim(disk);
    ReportLostCopies();
    lock.lock();
    if (!st.ok()) return st.WithContext("tier '" + name + "': reclaim");
  }
  // First, as the one step that allocates: should it throw, nothing has
  // changed (a writer counted and never ended would keep the region from
  // reclaim, and a reclaim waiting for it would wait for good).
  uint32_t& writes_of_id = writing.try_emplace(id, 0).first->second;
  Region& r = regions[active];
  Placement p;
  p.loc = BlockLocation{static_cast<uint32_t>(active), static_cast<uint32_t>(r.write_ptr), payload,
                        checksum, r.generation};
  p.seq = ++seq;
  r.write_ptr += disk;
  ++r.writers;
  ++writes_of_id;
  used_payload += payload;
  live_disk += disk;
  return p;
}

void NvmeTier::State::DropLocked(const NsKey& id, const Entry& e, bool record_delete) {
  if (record_delete) pending[id] = std::nullopt;  // first: should it throw, nothing changed
  const uint64_t disk = DiskBytes(e.loc.payload_bytes);
  regions[e.loc.region].live_bytes -= disk;
  used_payload -= e.loc.payload_bytes;
  live_disk -= disk;
  if (e.unclaimed) UncountUnclaimedLocked(e.loc.payload_bytes);
}

void NvmeTier::State::ClaimLocked(Entry& e) {
  if (!e.unclaimed) return;
  e.unclaimed = false;
  UncountUnclaimedLocked(e.loc.payload_bytes);
}

void NvmeTier::State::UncountUnclaimedLocked(uint64_t payload) {
  unclaimed_payload -= payload;
  unclaimed_disk -= DiskBytes(payload);
  if (--unclaimed_blocks == 0) unclaimed_order.clear();
}

// The queue is not kept exact: ids claimed, removed or replaced since open
// are skipped here. The delete reaches RocksDB with the next group commit.
bool NvmeTier::State::DropOldestUnclaimedLocked() {
  while (!unclaimed_order.empty()) {
    const NsKey id = unclaimed_order.front();
    unclaimed_order.pop_front();
    const Entry* e = map.Find(id);
    if (e == nullptr || !e->unclaimed) continue;
    DropLocked(id, *e, true);
    map.Erase(id);
    ++stats.unclaimed_dropped;
    return true;
  }
  return false;
}

void NvmeTier::State::RequestCommitLocked() {
  commit_requested = true;
  commit_cv.notify_all();
}

Status NvmeTier::State::CommitNow() {
  std::unique_lock lock(mu);
  if (stop_committer) return Status::Unavailable("tier '" + name + "' is closed");
  const uint64_t target = commits_started + 1;
  RequestCommitLocked();
  commit_cv.wait(lock, [&] { return commits_done >= target; });
  return last_commit;
}

// Group commit: the data of every pending entry was written (its write
// completed) before the entry became pending, so one fdatasync here makes
// all of it durable before RocksDB learns where it is. The sync goes through
// the engine (IoOp::kFsync), under its deadline. A commit that fails puts its
// updates back, behind any newer change of the same block made meanwhile, so
// the next commit retries them. Entries left pending for
// nvme.commit_interval_ms are committed without being asked: a tier written
// slowly would otherwise keep its last blocks out of the index until 64 more.
void NvmeTier::State::CommitLoop() {
  const auto interval = std::chrono::milliseconds(options.nvme.commit_interval_ms);
  std::unique_lock lock(mu);
  for (;;) {
    commit_cv.wait_for(lock, interval, [&] {
      ++committer_wakeups;
      return commit_requested || stop_committer;
    });
    if (stop_committer && !commit_requested) break;
    if (!commit_requested && pending.empty()) continue;  // the interval passed, nothing to do
    commit_requested = false;
    const uint64_t epoch = ++commits_started;
    std::vector<IndexUpdate> updates;
    try {
      updates.reserve(pending.size());
    } catch (const std::bad_alloc&) {
      // Nothing taken yet: the entries stay pending for the next commit.
      last_commit = Status::ResourceExhausted("nvme: out of memory committing the index");
      commits_done = epoch;
      commit_cv.notify_all();
      continue;
    }
    for (auto& [id, loc] : pending) updates.push_back({id, loc});
    pending.clear();
    since_commit = 0;
    const WriteTotals totals{totals_at_open.host_bytes + stats.host_bytes_written,
                             totals_at_open.device_bytes + stats.device_bytes_written};
    lock.unlock();
    Status st;
    if (!updates.empty()) {
      try {
        st = SyncIo(IoOp::kFsync, 0, {}).WithContext("nvme data sync");
        if (st.ok()) st = index->Apply(updates, &totals);
      } catch (const std::bad_alloc&) {
        st = Status::ResourceExhausted("nvme: out of memory committing the index");
      } catch (...) {
        st = Status::Internal("nvme: committing the index threw");
      }
    }
    lock.lock();
    if (!updates.empty()) {
      if (st.ok()) {
        ++stats.index_commits;
      } else {
        ++stats.commit_failures;
        try {
          for (IndexUpdate& u : updates) pending.try_emplace(u.id, u.location);
        } catch (const std::bad_alloc&) {
          // Those not put back stay readable here but are never made
          // durable: after a restart they are misses, as after a crash
          // before their commit.
        }
        try {
          if (log) log->Log(LogLevel::kError, "nvme tier '" + name + "': " + st.ToString());
        } catch (...) {
        }
      }
    }
    last_commit = st;
    commits_done = epoch;
    commit_cv.notify_all();
  }
}

void NvmeTier::State::Close() {
  if (committer.joinable()) {
    (void)CommitNow();
    {
      std::lock_guard lock(mu);
      stop_committer = true;
      commit_cv.notify_all();
    }
    committer.join();
  }
  if (engine) engine->Shutdown();
  index.reset();
  file = DataFile();  // drops the store's lock: it may be reopened at once
}

}  // namespace kvtier::internal
