// The NVMe tier's read path: index lookup under the lock, then the block's
// I/O straight into the caller's buffer or through a bounce buffer, and the
// header and checksum checks on completion.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <optional>

#include "kvtier/block_header.h"
#include "tiers/nvme/nvme_block_io.h"
#include "tiers/nvme/nvme_state.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::internal {
namespace {

std::string BlockName(const NsKey& id, const BlockLocation& loc) {
  return "nvme block " + ToHex(id.key) + " (region " + std::to_string(loc.region) + ", offset " +
         std::to_string(loc.offset) + ")";
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
  BlockParts parts;
};

// Checks the header and checksum; only a block that passes both reaches the
// caller as OK. A block that fails is dropped from the index (a later read
// misses) unless it was replaced meanwhile.
// Never throws: out of memory for a failure's message, the block still
// fails (a fixed message), and the region's pin is always released, or
// reclaim of the region would wait for it for good.
void FinishRead(NvmeTier::State& s, ReadCtx& c, const Status& io, CompletionSource& done) noexcept {
  Status st = io;
  std::span<const std::byte> payload;
  if (st.ok()) {
    payload = c.direct ? std::span<const std::byte>(c.dst.data(), c.loc.payload_bytes)
                       : std::span<const std::byte>(c.buf.data() + kNvmeAlign, c.loc.payload_bytes);
    // Only a failing block builds messages.
    st = DescribedStatus(StatusCode::kCorruption, "nvme read: the block fails its checks", [&] {
      Result<BlockHeader> h = HeaderMatching(c.buf.span(), c.id, c.loc);
      Status v = h.ok() ? VerifyBlock(*h, c.id.ns, c.id.key, payload) : h.status();
      return v.ok() ? v
                    : Status::Corruption(BlockName(c.id, c.loc) + ": " + std::string(v.message()));
    });
  }
  if (st.ok() && !c.direct) std::memcpy(c.dst.data(), payload.data(), payload.size());
  {
    std::lock_guard lock(s.mu);
    Region& r = s.regions[c.loc.region];
    if (--r.readers == 0) s.pin_cv.notify_all();
    // Hits matter only for reinsertion; a good read claims a recovered block.
    if (st.ok() && (s.options.nvme.reinsert_hits > 0 || s.unclaimed_blocks > 0)) {
      Entry* e = s.map.Find(c.id);
      if (e != nullptr && e->seq == c.seq) {
        ++e->hits;
        s.ClaimLocked(*e);
      }
    }
    if (st.code() == StatusCode::kCorruption) {
      ++s.stats.corruptions;
      const Entry* e = s.map.Find(c.id);
      try {
        if (e != nullptr && e->seq == c.seq && e->loc == c.loc) {
          s.DropLocked(c.id, *e, true);
          s.map.Erase(c.id);
        }
      } catch (...) {  // out of memory to record the drop: it stays, and fails its next read too
      }
    }
  }
  const uint64_t bytes = st.ok() ? c.loc.payload_bytes : 0;
  done.Set(c.item, std::move(st), bytes);
}

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
  const Entry* e = s.map.Find(id);
  if (e == nullptr) return hit;
  hit.found = true;
  hit.loc = e->loc;
  hit.seq = e->seq;
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

// Whole blocks' requests, together at most the engine's queue, and the
// reads they complete.
struct ReadChunk {
  std::vector<IoRequest> reqs;
  std::vector<std::shared_ptr<ReadCtx>> ctxs;
};

}  // namespace

// Only the index lookup holds mu. The pin it takes keeps the block's bytes in
// place until FinishRead, so a block overwritten or removed after the lookup
// still reads as the version looked up; FinishRead verifies header and
// checksum against that version and updates the index entry only while its
// seq (and location) still match.
//
// The requests go out in chunks of whole blocks, none larger than the
// engine's queue (nvme.max_queued), so a batch of any size fits; a chunk that
// finds the queue full of other I/O waits for room (SubmitWhenRoom).
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
  const size_t limit = std::max<size_t>(kMaxBlockRequests, s_->options.nvme.max_queued);
  std::vector<ReadChunk> chunks;
  size_t i = 0;
  try {
    for (; i < ops.size(); ++i) {
      std::shared_ptr<ReadCtx> c = PrepareRead(hits[i], name(), i, ns, ops[i], batch->done);
      if (c == nullptr) continue;
      std::optional<iovec> payload;
      if (c->direct) payload = iovec{c->dst.data(), c->loc.payload_bytes};
      std::vector<IoRequest> block =
          BlockRequests(*s_->engine, IoOp::kRead, s_->file.fd(), s_->FileOffset(c->loc),
                        {c->buf.data(), c->buf.size()}, payload);
      JoinParts(block, c->parts, [s = s_.get(), batch, c](const Status& st) {
        FinishRead(*s, *c, st, batch->done);
        batch->Release();
      });
      if (chunks.empty() || chunks.back().reqs.size() + block.size() > limit) {
        chunks.emplace_back();
      }
      for (IoRequest& r : block) chunks.back().reqs.push_back(std::move(r));
      chunks.back().ctxs.push_back(std::move(c));  // last: from here FinishRead unpins it
    }
  } catch (const std::bad_alloc&) {
    // Out of memory building the I/O: nothing goes out. Contexts built so far
    // release their pins in FinishRead; the hits from `i` on hold pins no
    // context owns, and a pin never released would stall reclaim for good.
    const Status oom = Status::ResourceExhausted("nvme read: out of memory building the I/O");
    for (ReadChunk& chunk : chunks) {
      for (auto& c : chunk.ctxs) FinishRead(*s_, *c, oom, batch->done);
    }
    chunks.clear();
    {
      std::lock_guard lock(s_->mu);
      for (size_t j = i; j < ops.size(); ++j) {
        if (hits[j].pinned && --s_->regions[hits[j].loc.region].readers == 0)
          s_->pin_cv.notify_all();
      }
    }
    for (size_t j = i; j < ops.size(); ++j) batch->done.Set(j, oom);
  }
  for (const ReadChunk& chunk : chunks) {
    batch->remaining.fetch_add(chunk.ctxs.size(), std::memory_order_relaxed);
  }
  // Once a chunk is refused, the ones after it are not tried.
  Status st;
  for (ReadChunk& chunk : chunks) {
    if (st.ok()) st = SubmitWhenRoom(*s_->engine, chunk.reqs, s_->options.nvme.io_timeout_ms);
    if (st.ok()) continue;
    for (auto& c : chunk.ctxs) {
      FinishRead(*s_, *c, st, batch->done);
      batch->Release();
    }
  }
  batch->Release();
}

}  // namespace kvtier::internal
