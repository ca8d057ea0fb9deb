// The NVMe tier's write, remove and lookup paths, its statistics and its
// construction; reads are in nvme_read.cc.
#include "tiers/nvme/nvme_tier.h"

#include <atomic>
#include <cstring>
#include <optional>

#include "kvtier/block_header.h"
#include "tiers/nvme/nvme_block_io.h"
#include "tiers/nvme/nvme_state.h"

namespace kvtier::internal {

NvmeTier::NvmeTier(const TierOptions& options, std::unique_ptr<State> state)
    : Tier(options.name, "nvme",
           TierCapabilities{.persistent = true,
                            .checksummed = true,
                            .local_index = true,
                            .max_block_bytes = state->block_bytes}),
      s_(std::move(state)) {}

NvmeTier::~NvmeTier() { Shutdown(); }

void NvmeTier::DoShutdown() { s_->Close(); }

TierUsage NvmeTier::Usage() const {
  std::lock_guard lock(s_->mu);
  // Unclaimed blocks are free space to the caller: Reserve drops them on demand.
  return {s_->options.capacity_bytes, s_->used_payload - s_->unclaimed_payload,
          s_->map.size() - s_->unclaimed_blocks, s_->unclaimed_blocks, s_->unclaimed_payload};
}

NvmeStats NvmeTier::Stats() const {
  std::lock_guard lock(s_->mu);
  NvmeStats st = s_->stats;
  st.fixed_buffer_ios = s_->engine->FixedBufferIos();
  st.free_regions = 0;
  for (const Region& r : s_->regions) st.free_regions += r.state == RegionState::kFree;
  return st;
}

Status NvmeTier::Flush() { return s_->CommitNow(); }

uint64_t NvmeTier::DoRegisterHostMemory(std::span<std::byte> memory) {
  const iovec range{memory.data(), memory.size()};
  const uint64_t n = s_->engine->RegisterBuffers(std::span(&range, 1));
  std::lock_guard lock(s_->mu);
  const bool first = s_->stats.registered_bytes == 0;  // later calls register nothing
  s_->stats.registered_bytes += n;
  if (first && n < memory.size() && s_->log) {
    s_->log->Log(LogLevel::kInfo,
                 "nvme tier '" + s_->name + "': " + std::to_string(n) + " of " +
                     std::to_string(memory.size()) +
                     " bytes of host memory registered as io_uring fixed buffers (the rest "
                     "uses plain I/O; raise RLIMIT_MEMLOCK to register more)");
  }
  return n;
}

std::optional<uint64_t> NvmeTier::TEST_FileOffset(NamespaceId ns, const BlockKey& key) const {
  std::lock_guard lock(s_->mu);
  const Entry* e = s_->map.Find({ns, key});
  if (e == nullptr) return std::nullopt;
  return s_->FileOffset(e->loc);
}

uint64_t NvmeTier::TEST_CommitterWakeups() const {
  std::lock_guard lock(s_->mu);
  return s_->committer_wakeups;
}

void NvmeTier::TEST_SetAfterReadLookup(std::function<void()> hook) {
  s_->after_read_lookup = std::move(hook);
}

void NvmeTier::TEST_SetAfterWriteReserve(std::function<void()> hook) {
  s_->after_write_reserve = std::move(hook);
}

void NvmeTier::TEST_SetBeforeReclaim(std::function<void()> hook) {
  s_->before_reclaim = std::move(hook);
}

void NvmeTier::TEST_SetReclaimIoChunk(uint64_t bytes) { s_->sync_io_chunk = bytes; }

void NvmeTier::TEST_SetDuringReclaimScan(std::function<void()> hook) {
  s_->during_reclaim_scan = std::move(hook);
}

// ---- writes ------------------------------------------------------------------

namespace {

// What a write needs between submission and completion.
struct WriteCtx {
  size_t item = 0;
  NsKey id;
  Placement place;
  AlignedBuffer buf;  // header page, plus the padded payload when bouncing
  BlockParts parts;
};

// Installs a completed write unless a later write or a remove of the same
// key overtook it; then the bytes just written are dead space.
void FinishWrite(NvmeTier::State& s, WriteCtx& c, const Status& io, CompletionSource& done) {
  const BlockLocation& loc = c.place.loc;
  const uint64_t disk = DiskBytes(loc.payload_bytes);
  {
    std::lock_guard lock(s.mu);
    Region& r = s.regions[loc.region];
    if (--r.writers == 0) s.pin_cv.notify_all();
    auto w = s.writing.find(c.id);
    const bool last_writer = --w->second == 0;
    if (last_writer) s.writing.erase(w);
    auto tomb = s.tombstones.find(c.id);
    const bool removed_after = tomb != s.tombstones.end() && tomb->second > c.place.seq;
    if (last_writer && tomb != s.tombstones.end()) s.tombstones.erase(tomb);
    const Entry* old = s.map.Find(c.id);
    const bool newest = old == nullptr || old->seq < c.place.seq;
    // The reservation's accounting moves to the entry, or is given back.
    s.used_payload -= loc.payload_bytes;
    s.live_disk -= disk;
    if (io.ok()) s.stats.device_bytes_written += disk;
    if (io.ok() && newest && !removed_after) {
      if (old != nullptr) s.DropLocked(c.id, *old, false);
      s.map[c.id] = Entry{loc, c.place.seq};
      r.live_bytes += disk;
      s.used_payload += loc.payload_bytes;
      s.live_disk += disk;
      s.pending[c.id] = loc;
      s.stats.host_bytes_written += loc.payload_bytes;
      if (++s.since_commit >= s.options.nvme.commit_every_blocks) s.RequestCommitLocked();
    }
  }
  done.Set(c.item, io, io.ok() ? loc.payload_bytes : 0);
}

// Fills the header page and, when the source cannot go to the device as is,
// a padded copy of the payload behind it. May throw std::bad_alloc.
void FillWriteBuffer(WriteCtx& c, const WriteOp& op, const BlockHeader& header, bool direct) {
  c.buf = AlignedBuffer(direct ? kNvmeAlign : DiskBytes(op.src.size()));
  EncodeBlockHeader(header, c.buf.span().first(kBlockHeaderBytes));
  if (!direct) std::memcpy(c.buf.data() + kNvmeAlign, op.src.data(), op.src.size());
}

}  // namespace

// Each block is submitted as soon as it has its place: a later block's
// reservation may have to reclaim, and reclaim waits for the writes already
// placed in its victim region, so none may sit unsubmitted here. For the same
// reason every reservation ends in FinishWrite, also when building the I/O
// runs out of memory.
void NvmeTier::DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) {
  auto batch = std::make_shared<BatchDone>(std::move(done));
  const Status oom = Status::ResourceExhausted("nvme write: out of memory building the I/O");
  for (size_t i = 0; i < ops.size(); ++i) {
    const NsKey id{ns, ops[i].key};
    const BlockHeader header = MakeBlockHeader(ns, ops[i].key, ops[i].src, ops[i].checksum);
    std::shared_ptr<WriteCtx> c;
    try {
      c = std::make_shared<WriteCtx>();
    } catch (const std::bad_alloc&) {
      batch->done.Set(i, oom);
      continue;
    }
    c->item = i;
    c->id = id;
    Result<Placement> place = s_->Reserve(id, ops[i].src.size(), header.payload_checksum);
    if (!place.ok()) {
      batch->done.Set(i, place.status());
      continue;
    }
    c->place = *place;
    const bool direct = IsAligned(ops[i].src.data()) && ops[i].src.size() % kNvmeAlign == 0;
    std::vector<IoRequest> req;
    try {
      if (s_->after_write_reserve) s_->after_write_reserve();
      FillWriteBuffer(*c, ops[i], header, direct);
      std::optional<iovec> payload;
      if (direct) payload = iovec{const_cast<std::byte*>(ops[i].src.data()), ops[i].src.size()};
      req = BlockRequests(*s_->engine, IoOp::kWrite, s_->file.fd(), s_->FileOffset(place->loc),
                          {c->buf.data(), c->buf.size()}, payload);
      JoinParts(req, c->parts, [s = s_.get(), batch, c](const Status& st) {
        FinishWrite(*s, *c, st, batch->done);
        batch->Release();
      });
    } catch (const std::bad_alloc&) {
      FinishWrite(*s_, *c, oom, batch->done);
      continue;
    }
    batch->remaining.fetch_add(1, std::memory_order_relaxed);
    if (Status st = SubmitWhenRoom(*s_->engine, req, s_->options.nvme.io_timeout_ms); !st.ok()) {
      FinishWrite(*s_, *c, st, batch->done);
      batch->Release();
    }
  }
  batch->Release();
}

// ---- removes and lookups -----------------------------------------------------

void NvmeTier::DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) {
  {
    std::lock_guard lock(s_->mu);
    for (const BlockKey& key : keys) {
      const NsKey id{ns, key};
      if (const Entry* e = s_->map.Find(id)) {
        s_->DropLocked(id, *e, true);
        s_->map.Erase(id);
      }
      // A write of this key still in flight must not resurrect it.
      if (s_->writing.contains(id)) s_->tombstones[id] = ++s_->seq;
    }
  }
  done.SetAll(Status::Ok());
  done.Finish();
}

void NvmeTier::DoContains(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) {
  std::lock_guard lock(s_->mu);
  for (size_t i = 0; i < keys.size(); ++i) {
    done.Set(i, s_->map.Contains({ns, keys[i]}) ? Status::Ok()
                                                : Status::NotFound("not in tier '" + name() + "'"));
  }
  done.Finish();
}

// Contains claims nothing: a lookup may ask about keys past the run it
// adopts, and a claimed block nobody above knows of could never be evicted.
void NvmeTier::DoClaim(NamespaceId ns, std::span<const BlockKey> keys) {
  std::lock_guard lock(s_->mu);
  if (s_->unclaimed_blocks == 0) return;
  for (const BlockKey& key : keys) {
    if (Entry* e = s_->map.Find({ns, key})) s_->ClaimLocked(*e);
  }
}

// ---- construction --------------------------------------------------------------

Result<std::unique_ptr<NvmeTier>> OpenNvmeTier(const TierOptions& options,
                                               const TierContext& context,
                                               std::unique_ptr<IoEngine> engine) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  TierContext ctx = context;
  if (!ctx.log) ctx.log = StderrLogSink();
  auto state = NvmeTier::State::Open(options, ctx, std::move(engine));
  if (!state.ok()) return state.status().WithContext("tier '" + options.name + "'");
  return std::unique_ptr<NvmeTier>(new NvmeTier(options, std::move(state).value()));
}

Result<std::unique_ptr<Tier>> NewNvmeTier(const TierOptions& options, const TierContext& context) {
  auto tier = OpenNvmeTier(options, context);
  if (!tier.ok()) return tier.status();
  return std::unique_ptr<Tier>(std::move(tier).value());
}

}  // namespace kvtier::internal
