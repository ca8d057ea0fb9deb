#include "tiers/remote/rdma_link.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace kvtier::internal::memd {
namespace {

constexpr uint64_t kNanosPerMs = 1'000'000;

// How much sooner than the server this side takes a lease to end. The
// server's lease started when it built the LEASE_REPLY (RdmaGrants::Lease),
// before the reply waited in its send queue, crossed the network and was
// read here, and its millisecond clock may end it up to 1 ms early. An
// eighth of the lease plus 1 ms (251 ms of the default 2 s) covers a reply
// held up that long while leaving most of the lease to read in; a reply
// slower still can see a reused slot, which the header and checksum checks
// catch (Corruption, never wrong bytes). A lease too short for the margin
// ends at once: its items fail without a READ.
uint64_t LeaseMarginNs(uint32_t lease_ms) { return lease_ms * kNanosPerMs / 8 + kNanosPerMs; }

// The server may have given the slot to another block: a miss for now. Not
// NotFound, which would make the tier forget a block that is likely still
// stored; a later GET takes a new lease on it.
Status LeaseEndedBefore(const char* what) {
  return Status::Unavailable(std::string("the lease ended before the RDMA READ ") + what);
}

}  // namespace

// One batch's operations and the memory they use. Shared by the completion
// closures; the staging lease and the arena are let go once every operation
// posted on them has completed (or, when the link goes first, with the last
// closure), so an arena replaced meanwhile stays registered until then.
struct RdmaLinkPath::Batch {
  struct Op {
    size_t item = 0;
    LocalPiece pieces[2];
    uint64_t addr = 0;
    uint32_t rkey = 0;
    std::byte* header_staged = nullptr;  // read: copied to header_out at the end
    HeaderBytes* header_out = nullptr;
    std::byte* bounce = nullptr;  // read: copied to bounce_out at the end
    std::byte* bounce_out = nullptr;
  };
  bool write = false;
  std::vector<Status> items;
  std::vector<uint64_t> bytes;
  std::vector<Op> ops;
  size_t remaining = 0;
  ItemsDone done;
  std::weak_ptr<const void> outputs;  // read: headers and dsts may be written
  // read: when its lease ends, in the path's clock's nanoseconds.
  uint64_t lease_end_ns = std::numeric_limits<uint64_t>::max();
  RdmaStagingPool::Lease staging;
  std::shared_ptr<RdmaMemory> arena;  // the arena its in-place pieces use
};

Result<std::unique_ptr<RdmaLinkPath>> RdmaLinkPath::Create(RdmaDevice& device,
                                                           std::shared_ptr<RdmaMemory> arena,
                                                           LoopPost post,
                                                           std::shared_ptr<Clock> clock,
                                                           const RdmaStagingOptions& staging) {
  KVTIER_RETURN_IF_ERROR(staging.Validate());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RdmaQp> qp, device.CreateQp());
  if (!clock) clock = SystemClock();
  return std::unique_ptr<RdmaLinkPath>(
      new RdmaLinkPath(std::move(qp), std::move(arena), std::move(post), std::move(clock),
                       std::make_unique<RdmaStagingPool>(device, staging)));
}

RdmaLinkPath::~RdmaLinkPath() {
  // Completions still on their way find the token gone and do nothing; the
  // queue pair is destroyed before the staging leases they hold.
  alive_.reset();
  backlog_.clear();
  qp_.reset();
}

Status RdmaLinkPath::Connect(const RdmaReady& ready) {
  if (ready.lease_ms == 0 || ready.lease_ms > kMaxLeaseMs) {
    return Status::InvalidArgument("RDMA_READY lease of " + std::to_string(ready.lease_ms) +
                                   " ms is out of range");
  }
  KVTIER_RETURN_IF_ERROR(qp_->Connect(ready.qp));
  region_ = ready.pool;
  lease_ms_ = ready.lease_ms;
  return Status::Ok();
}

void RdmaLinkPath::UseArena(std::shared_ptr<RdmaMemory> arena) { arena_ = std::move(arena); }

uint32_t RdmaLinkPath::ArenaKey(const std::byte* p, size_t n) const {
  if (!arena_) return 0;
  const std::span<std::byte> a = arena_->bytes();
  if (p < a.data() || n > a.size() || p - a.data() > static_cast<ptrdiff_t>(a.size() - n)) return 0;
  return arena_->lkey();
}

bool RdmaLinkPath::Stage(Batch& b, size_t bytes) {
  auto lease = staging_->Acquire(bytes);
  if (lease.ok()) {
    b.staging = std::move(lease).value();
    return true;
  }
  // A local shortage (no memory, or the device refused to register it)
  // fails this batch's transfers; the server did nothing wrong.
  const Status why =
      Status::ResourceExhausted("no registered staging memory for " + std::to_string(bytes) +
                                " bytes: " + lease.status().ToString());
  for (Status& item : b.items) {
    if (item.ok()) item = why;
  }
  Finish(b);
  return false;
}

void RdmaLinkPath::Finish(Batch& b) {
  // Returned before `done` runs, so a batch that `done` starts reuses it.
  b.staging.Reset();
  b.arena.reset();
  b.done(std::move(b.items), std::move(b.bytes));
}

Status RdmaLinkPath::WriteGranted(const GrantList& grants, std::span<const HeaderBytes> headers,
                                  std::span<const std::span<const std::byte>> payloads,
                                  ItemsDone done) {
  const size_t n = grants.items.size();
  if (n != headers.size() || n != payloads.size()) {
    return Status::InvalidArgument("PUT_GRANT item count does not match the request");
  }
  auto b = std::make_shared<Batch>();
  b->write = true;
  b->arena = arena_;
  b->items.assign(n, Status::Ok());
  b->bytes.assign(n, 0);
  b->done = std::move(done);
  size_t staged = 0;
  for (size_t i = 0; i < n; ++i) {
    const RemoteSlot& g = grants.items[i];
    if (g.code != StatusCode::kOk) {
      b->items[i] = Status(g.code, "server refused the block");
      continue;
    }
    KVTIER_RETURN_IF_ERROR(CheckGrant(region_, g, kBlockHeaderBytes + payloads[i].size()));
    staged += kBlockHeaderBytes;
    if (ArenaKey(payloads[i].data(), payloads[i].size()) == 0) staged += payloads[i].size();
  }
  if (!Stage(*b, staged)) return Status::Ok();
  std::byte* at = b->staging.bytes().data();
  for (size_t i = 0; i < n; ++i) {
    if (grants.items[i].code != StatusCode::kOk) continue;
    Batch::Op op{i, {}, grants.items[i].addr, grants.items[i].rkey};
    std::memcpy(at, headers[i].data(), kBlockHeaderBytes);
    op.pieces[0] = {at, static_cast<uint32_t>(kBlockHeaderBytes), b->staging.lkey()};
    at += kBlockHeaderBytes;
    const auto& src = payloads[i];
    if (uint32_t key = ArenaKey(src.data(), src.size()); key != 0) {
      op.pieces[1] = {const_cast<std::byte*>(src.data()), static_cast<uint32_t>(src.size()), key};
    } else {
      std::memcpy(at, src.data(), src.size());
      op.pieces[1] = {at, static_cast<uint32_t>(src.size()), b->staging.lkey()};
      at += src.size();
    }
    b->bytes[i] = src.size();
    b->ops.push_back(op);
  }
  Launch(b);
  return Status::Ok();
}

Status RdmaLinkPath::ReadLeased(const LeaseReply& lease, std::span<const std::span<std::byte>> dsts,
                                std::span<HeaderBytes> headers, std::weak_ptr<const void> outputs,
                                ItemsDone done) {
  const size_t n = lease.items.size();
  if (n != dsts.size() || n != headers.size()) {
    return Status::InvalidArgument("LEASE_REPLY item count does not match the request");
  }
  auto b = std::make_shared<Batch>();
  const uint64_t lease_ns = lease_ms_ * kNanosPerMs;
  b->lease_end_ns = clock_->NowNanos() + lease_ns - std::min(lease_ns, LeaseMarginNs(lease_ms_));
  b->outputs = std::move(outputs);
  b->arena = arena_;
  b->items.assign(n, Status::Ok());
  b->bytes.assign(n, 0);
  b->done = std::move(done);
  size_t staged = 0;
  for (size_t i = 0; i < n; ++i) {
    const RemoteSlot& l = lease.items[i];
    if (l.code != StatusCode::kOk) {
      b->items[i] = l.code == StatusCode::kNotFound ? Status::NotFound("not on the server")
                                                    : Status(l.code, "server refused the read");
      continue;
    }
    if (l.bytes > kBlockHeaderBytes + dsts[i].size()) {
      b->items[i] = Status::InvalidArgument("destination of " + std::to_string(dsts[i].size()) +
                                            " bytes is smaller than the block's " +
                                            std::to_string(l.bytes - kBlockHeaderBytes));
      continue;
    }
    KVTIER_RETURN_IF_ERROR(CheckLease(region_, l, kBlockHeaderBytes + dsts[i].size()));
    const uint64_t payload = l.bytes - kBlockHeaderBytes;
    staged += kBlockHeaderBytes + (ArenaKey(dsts[i].data(), payload) == 0 ? payload : 0);
  }
  if (!Stage(*b, staged)) return Status::Ok();
  std::byte* at = b->staging.bytes().data();
  for (size_t i = 0; i < n; ++i) {
    if (!b->items[i].ok()) continue;
    const RemoteSlot& l = lease.items[i];
    const auto payload = static_cast<uint32_t>(l.bytes - kBlockHeaderBytes);
    Batch::Op op{i, {}, l.addr, l.rkey};
    op.pieces[0] = {at, static_cast<uint32_t>(kBlockHeaderBytes), b->staging.lkey()};
    op.header_staged = at;
    op.header_out = &headers[i];
    at += kBlockHeaderBytes;
    if (uint32_t key = ArenaKey(dsts[i].data(), payload); key != 0) {
      op.pieces[1] = {dsts[i].data(), payload, key};
    } else {
      op.pieces[1] = {at, payload, b->staging.lkey()};
      op.bounce = at;
      op.bounce_out = dsts[i].data();
      at += payload;
    }
    b->bytes[i] = payload;
    b->ops.push_back(op);
  }
  Launch(b);
  return Status::Ok();
}

bool RdmaLinkPath::LeaseEnded(const Batch& b) const {
  return !b.write && clock_->NowNanos() >= b.lease_end_ns;
}

void RdmaLinkPath::Launch(const std::shared_ptr<Batch>& b) {
  b->remaining = b->ops.size();
  if (b->remaining == 0) return Finish(*b);
  for (size_t i = 0; i < b->ops.size(); ++i) backlog_.emplace_back(b, i);
  Drain();
}

Status RdmaLinkPath::PostOne(const std::shared_ptr<Batch>& b, size_t op) {
  const Batch::Op& o = b->ops[op];
  // A zero-length payload needs no second piece.
  const size_t pieces = o.pieces[1].bytes == 0 ? 1 : 2;
  std::weak_ptr<bool> alive = alive_;
  RdmaDone cb = [this, alive, b, op, post = post_](const Status& s) {
    post([this, alive, b, op, s] {
      if (alive.expired()) return;
      OpDone(b, op, s);
      // The batch's callback may have closed the link and destroyed this.
      if (!alive.expired()) Drain();
    });
  };
  const std::span<const LocalPiece> local(o.pieces, pieces);
  return b->write ? qp_->PostWrite(local, o.addr, o.rkey, std::move(cb))
                  : qp_->PostRead(local, o.addr, o.rkey, std::move(cb));
}

void RdmaLinkPath::OpDone(const std::shared_ptr<Batch>& b, size_t op, const Status& completion) {
  Batch::Op& o = b->ops[op];
  // A READ that ran into the end of its lease may have raced a rewrite of
  // its slot: what it brought is not used, even if it would verify.
  const Status s = completion.ok() && LeaseEnded(*b) ? LeaseEndedBefore("completed") : completion;
  if (!s.ok()) {
    b->items[o.item] = s;
    b->bytes[o.item] = 0;
  } else if (!b->write && !b->outputs.expired()) {
    std::memcpy(o.header_out->data(), o.header_staged, kBlockHeaderBytes);
    if (o.bounce != nullptr) std::memcpy(o.bounce_out, o.bounce, o.pieces[1].bytes);
  }
  if (--b->remaining == 0) Finish(*b);
}

void RdmaLinkPath::Drain() {
  const std::weak_ptr<bool> alive = alive_;
  while (!backlog_.empty()) {
    auto [b, op] = backlog_.front();
    // A READ whose lease has ended is not posted: its slot may be reused.
    Status s = LeaseEnded(*b) ? LeaseEndedBefore("was posted") : PostOne(b, op);
    // A full completion queue: wait for a completion of this path to retry
    // (the request's deadline bounds the wait).
    if (s.code() == StatusCode::kBusy) return;
    backlog_.pop_front();
    if (!s.ok()) OpDone(b, op, s);
    if (alive.expired()) return;
  }
}

}  // namespace kvtier::internal::memd
