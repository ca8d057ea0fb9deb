// The RDMA half of one remote-client connection (remote_client_rdma.cc): its
// queue pair, the checks of what the server grants or leases, and the
// one-sided operations of a batch. The TCP connection carries the control
// frames; this class only moves block bytes:
//   PUT: after PUT_GRANT, WriteGranted RDMA WRITEs BlockHeader + payload of
//        each granted item into its slot; the link then sends PUT_COMMIT.
//   GET: after LEASE_REPLY, ReadLeased RDMA READs each leased block into
//        the caller's destination; the link verifies header and checksum
//        and sends LEASE_RELEASE. Past the lease's end the server may reuse
//        the slot, so no READ is posted after it and one completing after it
//        fails: the end is the reply's arrival plus RDMA_READY's lease_ms,
//        less a margin, on the path's clock.
// Local memory must be registered: buffers inside the registered host
// arena (Tier::RegisterHostMemory) are used in place; block headers and
// buffers outside it go through staging memory lent by a pool of registered
// buffers (rdma_staging.h) for the life of the batch.
//
// Threads: every method and every ItemsDone runs on the client's loop
// thread (completions are handed over with `post`). Nothing is touched
// after the object is destroyed except through `post`, which must drop
// closures once the loop is gone.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kvtier/block_header.h"
#include "kvtier/env.h"
#include "tiers/remote/rdma_protocol.h"
#include "tiers/remote/rdma_staging.h"
#include "tiers/remote/rdma_transport.h"

namespace kvtier::internal::memd {

using HeaderBytes = std::array<std::byte, kBlockHeaderBytes>;
// Per item: OK with the payload bytes moved, or why its bytes did not move.
// Runs once per batch.
using ItemsDone = std::function<void(std::vector<Status> items, std::vector<uint64_t> bytes)>;
using LoopPost = std::function<void(std::function<void()>)>;

// Hands completions to the loop thread until Close(); closures posted
// after it are dropped (the loop may be gone). Thread-safe.
class LoopGate {
 public:
  explicit LoopGate(std::function<void(std::function<void()>)> post)
      : state_(std::make_shared<State>()) {
    state_->post = std::move(post);
  }
  LoopPost post() const {
    return [s = state_](std::function<void()> fn) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->post) s->post(std::move(fn));
    };
  }
  void Close() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->post = nullptr;
  }

 private:
  struct State {
    std::mutex mu;
    std::function<void(std::function<void()>)> post;  // guarded by mu
  };
  std::shared_ptr<State> state_;
};

class RdmaLinkPath {
 public:
  // A queue pair on `device`, not yet connected. `arena` may be null;
  // `clock` times leases (null: SystemClock()); `staging` sizes the pool of
  // staging buffers (InvalidArgument when it does not validate).
  // REQUIRES: `device` outlives this and every completion it delivers.
  static Result<std::unique_ptr<RdmaLinkPath>> Create(RdmaDevice& device,
                                                      std::shared_ptr<RdmaMemory> arena,
                                                      LoopPost post,
                                                      std::shared_ptr<Clock> clock = nullptr,
                                                      const RdmaStagingOptions& staging = {});
  ~RdmaLinkPath();
  RdmaLinkPath(const RdmaLinkPath&) = delete;
  RdmaLinkPath& operator=(const RdmaLinkPath&) = delete;

  RdmaHello Hello() const { return RdmaHello{qp_->local()}; }
  // Connects to the server's queue pair and keeps its pool region and lease
  // duration.
  Status Connect(const RdmaReady& ready);
  // Buffers inside `arena` are used in place from the next batch on; a
  // batch in flight keeps the arena it started with until it finishes.
  void UseArena(std::shared_ptr<RdmaMemory> arena);

  // REQUIRES: grants, headers and payloads have one entry per item. An item
  // whose grant code is not Ok reports that code; a granted item reports
  // ResourceExhausted when no staging memory could be had for the batch
  // (nothing is posted then, and `done` runs before this returns).
  // InvalidArgument (the server is not trusted) when a grant fails
  // CheckGrant; nothing is posted then and `done` is not called.
  Status WriteGranted(const GrantList& grants, std::span<const HeaderBytes> headers,
                      std::span<const std::span<const std::byte>> payloads, ItemsDone done);
  // Reads each leased block: its header into headers[i], its payload into
  // dsts[i]. NotFound for a missed item; InvalidArgument for an item whose
  // block is larger than its destination; ResourceExhausted, like
  // WriteGranted, without staging memory; an error status like
  // WriteGranted's when a lease fails CheckLease. Staged bytes are copied
  // into headers and dsts only while `outputs` is alive: once its owner
  // lets go (the request finished), a late completion touches neither.
  // Reads into the registered arena land in place, so only closing the
  // queue pair (destroying this) stops them. The lease is counted from
  // this call (the reply has just arrived), less a margin: an item whose
  // READ is not posted before it ends, or completes after it, is
  // Unavailable and its bytes are not used, even if they would verify.
  Status ReadLeased(const LeaseReply& lease, std::span<const std::span<std::byte>> dsts,
                    std::span<HeaderBytes> headers, std::weak_ptr<const void> outputs,
                    ItemsDone done);

  // Posts what the completion queue has room for; the rest waits for the
  // next completion of this path, or the next call (the link calls it on
  // each tick, for the case where none is in flight).
  void Drain();

 private:
  struct Batch;
  RdmaLinkPath(std::unique_ptr<RdmaQp> qp, std::shared_ptr<RdmaMemory> arena, LoopPost post,
               std::shared_ptr<Clock> clock, std::unique_ptr<RdmaStagingPool> staging)
      : qp_(std::move(qp)),
        arena_(std::move(arena)),
        post_(std::move(post)),
        clock_(std::move(clock)),
        staging_(std::move(staging)) {}
  // The lkey of [p, p + n) when it lies in the registered arena, else 0.
  uint32_t ArenaKey(const std::byte* p, size_t n) const;
  // Lends `b` staging memory; when there is none, fails its items still OK
  // with ResourceExhausted, finishes it and returns false.
  bool Stage(Batch& b, size_t bytes);
  // Ends a batch: its staging memory goes back to the pool, then `done` runs.
  static void Finish(Batch& b);
  // Whether `b` reads under a lease that has ended by now.
  bool LeaseEnded(const Batch& b) const;
  void Launch(const std::shared_ptr<Batch>& b);
  Status PostOne(const std::shared_ptr<Batch>& b, size_t op);
  void OpDone(const std::shared_ptr<Batch>& b, size_t op, const Status& completion);

  std::unique_ptr<RdmaQp> qp_;
  std::shared_ptr<RdmaMemory> arena_;
  LoopPost post_;
  std::shared_ptr<Clock> clock_;
  uint32_t lease_ms_ = 0;  // RDMA_READY's, from Connect on
  // Batches in flight hold leases on it, which outlive the pool if need be.
  std::unique_ptr<RdmaStagingPool> staging_;
  RdmaRegion region_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Operations not yet posted (the completion queue was full), in order.
  std::deque<std::pair<std::shared_ptr<Batch>, size_t>> backlog_;
};

}  // namespace kvtier::internal::memd
