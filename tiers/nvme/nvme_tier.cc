// The NVMe tier's data paths: reads, writes, removes and lookups.
#include "tiers/nvme/nvme_tier.h"

#include <atomic>
#include <cstring>
#include <new>
#include <optional>

#include "kvtier/block_header.h"
#include "tiers/nvme/nvme_state.h"

namespace kvtier::internal {
namespace {

std::string BlockName(const NsKey& id, const BlockLocation& loc) {
  return "nvme block " + ToHex(id.key) + " (region " + std::to_string(loc.region) + ", offset " +
         std::to_string(loc.offset) + ")";
}

// A block's I/O goes out as one or two requests (see BlockRequests); each
// records its status here and the last one to finish completes the block.
struct Parts {
  std::atomic<size_t> left{0};
  Status status[2];
  Status First() const { return status[0].ok() ? status[1] : status[0]; }
  // Records part `i`; true for the part that completes the block.
  bool Done(size_t i, const Status& st) {
    status[i] = st;
    return left.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
};

// Requests for one block at `offset`: the header page `head`, then, when
// given, the payload buffer behind it. Fixed-buffer operations take a single
// buffer, so a payload inside registered memory goes as its own request (and
// its bytes skip the per-I/O page pinning); otherwise both go as one
// vectored request.
std::vector<IoRequest> BlockRequests(const IoEngine& engine, IoOp op, int fd, uint64_t offset,
                                     iovec head, std::optional<iovec> payload) {
  std::vector<IoRequest> out(1);
  out[0].op = op;
  out[0].fd = fd;
  out[0].offset = offset;
  out[0].iov.push_back(head);
  if (!payload) return out;
  if (!engine.IsRegistered(payload->iov_base, payload->iov_len)) {
    out[0].iov.push_back(*payload);
    return out;
  }
  IoRequest p;
  p.op = op;
  p.fd = fd;
  p.offset = offset + head.iov_len;
  p.iov.push_back(*payload);
  out.push_back(std::move(p));
  return out;
}

// Wires each request of one block to `parts`; `finish(status)` runs once,
// after the last of them, with the first error.
template <typename Finish>
void JoinParts(std::vector<IoRequest>& reqs, Parts& parts, Finish finish) {
  parts.left.store(reqs.size(), std::memory_order_relaxed);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].id = i;
    reqs[i].done = [&parts, i, finish](const IoCompletion& io) {
      if (parts.Done(i, io.status)) finish(parts.First());
    };
  }
}

// What a read needs between submission and completion.
struct ReadCtx {
  size_t item = 0;
  NsKey id;
  BlockLocation loc;
  uint64_t seq = 0;
  std::span<std::byte> dst;
  AlignedBuffer buf;    // the header page, or the whole block when bouncing
  bool direct = false;  // payload lands in dst itself
  Parts parts;
};

struct WriteCtx {
  size_t item = 0;
  NsKey id;
  Placement place;
  AlignedBuffer buf;  // header page, plus the padded payload when bouncing
  Parts parts;
};

// Checks the header and checksum; only a block that passes both reaches the
// caller as OK. A block that fails is dropped from the index (a later read
// misses) unless it was replaced meanwhile.
void FinishRead(NvmeTier::State& s, ReadCtx& c, const Status& io, CompletionSource& done) {
  Status st = io;
  std::span<const std::byte> payload;
  if (st.ok()) {
    payload = c.direct ? std::span<const std::byte>(c.dst.data(), c.loc.payload_bytes)
                       : std::span<const std::byte>(c.buf.data() + kNvmeAlign, c.loc.payload_bytes);
    Result<BlockHeader> h = DecodeBlockHeader(c.buf.span().first(kBlockHeaderBytes));
    if (!h.ok()) {
      st = h.status();
    } else if (h->payload_checksum != c.loc.checksum || h->payload_bytes != c.loc.payload_bytes) {
      st = Status::Corruption("header does not match the index entry");
    } else {
      st = VerifyBlock(*h, c.id.ns, c.id.key, payload);
    }
    if (!st.ok()) {
      st = Status::Corruption(BlockName(c.id, c.loc) + ": " + std::string(st.message()));
    }
  }
  if (st.ok() && !c.direct) std::memcpy(c.dst.data(), payload.data(), payload.size());
  {
    std::lock_guard lock(s.mu);
    Region& r = s.regions[c.loc.region];
    if (--r.readers == 0) s.cv.notify_all();
    if (st.ok() && s.options.nvme.reinsert_hits > 0) {  // hits matter only for reinsertion
      auto it = s.map.find(c.id);
      if (it != s.map.end() && it->second.seq == c.seq) ++it->second.hits;
    }
    if (st.code() == StatusCode::kCorruption) {
      ++s.stats.corruptions;
      auto it = s.map.find(c.id);
      if (it != s.map.end() && it->second.seq == c.seq && it->second.loc == c.loc) {
        s.DropLocked(c.id, it->second, true);
        s.map.erase(it);
      }
    }
  }
  const uint64_t bytes = st.ok() ? c.loc.payload_bytes : 0;
  done.Set(c.item, std::move(st), bytes);
}

}  // namespace

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
  return {s_->options.capacity_bytes, s_->used_payload, s_->map.size()};
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
  auto it = s_->map.find({ns, key});
  if (it == s_->map.end()) return std::nullopt;
  return uint64_t{it->second.loc.region} * s_->region_bytes + it->second.loc.offset;
}

void NvmeTier::TEST_SetAfterReadLookup(std::function<void()> hook) {
  s_->after_read_lookup = std::move(hook);
}

// ---- reads -------------------------------------------------------------------

namespace {

// What the index holds for one read, copied out under the lock. A hit that
// will be read pins its region (Region::readers): reclaim waits for the pin
// to drop in FinishRead before the region is reused, so the bytes at `loc`
// stay those of this entry. Everything else a read needs (buffers,
// requests) is built from this copy after the lock is released.
struct ReadHit {
  bool found = false;
  bool pinned = false;  // found, and the buffer holds it: a read goes out
  BlockLocation loc;
  uint64_t seq = 0;
};

// REQUIRES: s.mu held.
ReadHit LookupReadLocked(NvmeTier::State& s, const NsKey& id, const ReadOp& op) {
  ReadHit hit;
  auto it = s.map.find(id);
  if (it == s.map.end()) return hit;
  hit.found = true;
  hit.loc = it->second.loc;
  hit.seq = it->second.seq;
  // A too small buffer is refused without a read, so it takes no pin.
  hit.pinned = op.dst.size() >= hit.loc.payload_bytes;
  if (hit.pinned) ++s.regions[hit.loc.region].readers;
  return hit;
}

// A miss or a too small buffer is answered at once (nullptr); otherwise the
// read's context, its region already pinned by LookupReadLocked.
std::shared_ptr<ReadCtx> PrepareRead(const ReadHit& hit, const std::string& tier, size_t i,
                                     NamespaceId ns, const ReadOp& op, CompletionSource& done) {
  if (!hit.found) {
    done.Set(i, Status::NotFound("not in tier '" + tier + "'"));
    return nullptr;
  }
  const BlockLocation& loc = hit.loc;
  if (!hit.pinned) {
    done.Set(i, Status::InvalidArgument("read buffer of " + std::to_string(op.dst.size()) +
                                        " bytes < block of " + std::to_string(loc.payload_bytes)));
    return nullptr;
  }
  auto c = std::make_shared<ReadCtx>();
  c->item = i;
  c->id = {ns, op.key};
  c->loc = loc;
  c->seq = hit.seq;
  c->dst = op.dst;
  c->direct = IsAligned(c->dst.data()) && loc.payload_bytes % kNvmeAlign == 0;
  c->buf = AlignedBuffer(c->direct ? kNvmeAlign : DiskBytes(loc.payload_bytes));
  return c;
}

}  // namespace

// Only the index lookup holds mu. The pin it takes keeps the block's bytes in
// place until FinishRead, so a block overwritten or removed after the lookup
// still reads as the version looked up; FinishRead verifies header and
// checksum against that version and updates the index entry only while its
// seq (and location) still match.
void NvmeTier::DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) {
  auto batch = std::make_shared<BatchDone>(std::move(done));
  std::vector<ReadHit> hits;
  hits.reserve(ops.size());
  {
    std::lock_guard lock(s_->mu);
    for (size_t i = 0; i < ops.size(); ++i) {
      hits.push_back(LookupReadLocked(*s_, {ns, ops[i].key}, ops[i]));
    }
  }
  if (s_->after_read_lookup) s_->after_read_lookup();
  std::vector<IoRequest> reqs;
  std::vector<std::shared_ptr<ReadCtx>> ctxs;
  size_t i = 0;
  try {
    for (; i < ops.size(); ++i) {
      std::shared_ptr<ReadCtx> c = PrepareRead(hits[i], name(), i, ns, ops[i], batch->done);
      if (c == nullptr) continue;
      std::optional<iovec> payload;
      if (c->direct) payload = iovec{c->dst.data(), c->loc.payload_bytes};
      std::vector<IoRequest> block =
          BlockRequests(*s_->engine, IoOp::kRead, s_->file.fd(),
                        uint64_t{c->loc.region} * s_->region_bytes + c->loc.offset,
                        {c->buf.data(), c->buf.size()}, payload);
      JoinParts(block, c->parts, [s = s_.get(), batch, c](const Status& st) {
        FinishRead(*s, *c, st, batch->done);
        batch->Release();
      });
      for (IoRequest& r : block) reqs.push_back(std::move(r));
      ctxs.push_back(std::move(c));
    }
  } catch (const std::bad_alloc&) {
    // Out of memory building the I/O: nothing goes out. Contexts built so far
    // release their pins in FinishRead; the hits from `i` on hold pins no
    // context owns, and a pin never released would stall reclaim for good.
    reqs.clear();
    const Status oom = Status::ResourceExhausted("nvme read: out of memory building the I/O");
    for (auto& c : ctxs) FinishRead(*s_, *c, oom, batch->done);
    ctxs.clear();
    {
      std::lock_guard lock(s_->mu);
      for (size_t j = i; j < ops.size(); ++j) {
        if (hits[j].pinned && --s_->regions[hits[j].loc.region].readers == 0) s_->cv.notify_all();
      }
    }
    for (size_t j = i; j < ops.size(); ++j) batch->done.Set(j, oom);
  }
  batch->remaining.fetch_add(ctxs.size(), std::memory_order_relaxed);
  if (Status st = reqs.empty() ? Status::Ok() : s_->engine->Submit(std::move(reqs)); !st.ok()) {
    for (auto& c : ctxs) {
      FinishRead(*s_, *c, st, batch->done);
      batch->Release();
    }
  }
  batch->Release();
}

// ---- writes ------------------------------------------------------------------

namespace {

// Installs a completed write unless a later write or a remove of the same
// key overtook it; then the bytes just written are dead space.
void FinishWrite(NvmeTier::State& s, WriteCtx& c, const Status& io, CompletionSource& done) {
  const BlockLocation& loc = c.place.loc;
  const uint64_t disk = DiskBytes(loc.payload_bytes);
  {
    std::lock_guard lock(s.mu);
    Region& r = s.regions[loc.region];
    if (--r.writers == 0) s.cv.notify_all();
    auto w = s.writing.find(c.id);
    const bool last_writer = --w->second == 0;
    if (last_writer) s.writing.erase(w);
    auto tomb = s.tombstones.find(c.id);
    const bool removed_after = tomb != s.tombstones.end() && tomb->second > c.place.seq;
    if (last_writer && tomb != s.tombstones.end()) s.tombstones.erase(tomb);
    auto it = s.map.find(c.id);
    const bool newest = it == s.map.end() || it->second.seq < c.place.seq;
    // The reservation's accounting moves to the entry, or is given back.
    s.used_payload -= loc.payload_bytes;
    s.live_disk -= disk;
    if (io.ok()) s.stats.device_bytes_written += disk;
    if (io.ok() && newest && !removed_after) {
      if (it != s.map.end()) s.DropLocked(c.id, it->second, false);
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

// The header page and, when the source cannot go to the device as is, a
// padded copy of the payload behind it.
std::shared_ptr<WriteCtx> PrepareWrite(size_t item, const NsKey& id, const WriteOp& op,
                                       const BlockHeader& header, bool direct) {
  auto c = std::make_shared<WriteCtx>();
  c->item = item;
  c->id = id;
  c->buf = AlignedBuffer(direct ? kNvmeAlign : DiskBytes(op.src.size()));
  EncodeBlockHeader(header, c->buf.span().first(kBlockHeaderBytes));
  if (!direct) std::memcpy(c->buf.data() + kNvmeAlign, op.src.data(), op.src.size());
  return c;
}

}  // namespace

// Each block is submitted as soon as it has its place: a later block's
// reservation may have to reclaim, and reclaim waits for the writes already
// placed in its victim region, so none may sit unsubmitted here.
void NvmeTier::DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) {
  auto batch = std::make_shared<BatchDone>(std::move(done));
  for (size_t i = 0; i < ops.size(); ++i) {
    const NsKey id{ns, ops[i].key};
    const BlockHeader header = MakeBlockHeader(ns, ops[i].key, ops[i].src, ops[i].checksum);
    Result<Placement> place = s_->Reserve(id, ops[i].src.size(), header.payload_checksum);
    if (!place.ok()) {
      batch->done.Set(i, place.status());
      continue;
    }
    const bool direct = IsAligned(ops[i].src.data()) && ops[i].src.size() % kNvmeAlign == 0;
    std::shared_ptr<WriteCtx> c = PrepareWrite(i, id, ops[i], header, direct);
    c->place = *place;
    std::optional<iovec> payload;
    if (direct) payload = iovec{const_cast<std::byte*>(ops[i].src.data()), ops[i].src.size()};
    std::vector<IoRequest> req =
        BlockRequests(*s_->engine, IoOp::kWrite, s_->file.fd(),
                      uint64_t{place->loc.region} * s_->region_bytes + place->loc.offset,
                      {c->buf.data(), c->buf.size()}, payload);
    JoinParts(req, c->parts, [s = s_.get(), batch, c](const Status& st) {
      FinishWrite(*s, *c, st, batch->done);
      batch->Release();
    });
    batch->remaining.fetch_add(1, std::memory_order_relaxed);
    if (Status st = s_->engine->Submit(std::move(req)); !st.ok()) {
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
      if (auto it = s_->map.find(id); it != s_->map.end()) {
        s_->DropLocked(id, it->second, true);
        s_->map.erase(it);
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
    done.Set(i, s_->map.contains({ns, keys[i]}) ? Status::Ok()
                                                : Status::NotFound("not in tier '" + name() + "'"));
  }
  done.Finish();
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
