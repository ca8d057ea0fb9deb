// Move-only owners of libibverbs handles (device context, protection domain,
// completion queue, queue pair, memory region), the one conversion of verbs
// errors, and a completion poller: one thread per completion queue, with CQ
// space reserved before every post so the queue can never overflow.
// Included only by RDMA code (built when KVTIER_HAVE_RDMA).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "kvtier/status.h"

namespace kvtier::internal::rdma {

// errno from a verbs call -> Status naming the call.
Status FromIbv(int err, std::string_view operation);

// The first RDMA device, opened. NotSupported naming `transport: tcp` when
// the machine has none.
class Context {
 public:
  static Result<Context> OpenFirst();
  Context(Context&& o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)) {}
  Context& operator=(Context&& o) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();
  ibv_context* get() const { return ctx_; }

 private:
  explicit Context(ibv_context* c) : ctx_(c) {}
  ibv_context* ctx_ = nullptr;
};

class ProtectionDomain {
 public:
  static Result<ProtectionDomain> Create(const Context& ctx);
  ProtectionDomain(ProtectionDomain&& o) noexcept : pd_(std::exchange(o.pd_, nullptr)) {}
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  ~ProtectionDomain();
  ibv_pd* get() const { return pd_; }

 private:
  explicit ProtectionDomain(ibv_pd* p) : pd_(p) {}
  ibv_pd* pd_ = nullptr;
};

// A registered range; in-flight work holds a lease on it (see STYLE.md).
class MemoryRegion {
 public:
  static Result<MemoryRegion> Register(const ProtectionDomain& pd, std::span<std::byte> bytes,
                                       int access);
  MemoryRegion(MemoryRegion&& o) noexcept : mr_(std::exchange(o.mr_, nullptr)) {}
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  ~MemoryRegion();
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(mr_->addr); }

 private:
  explicit MemoryRegion(ibv_mr* m) : mr_(m) {}
  ibv_mr* mr_ = nullptr;
};

class CompletionQueue {
 public:
  static Result<CompletionQueue> Create(const Context& ctx, int depth);
  CompletionQueue(CompletionQueue&& o) noexcept
      : cq_(std::exchange(o.cq_, nullptr)), depth_(o.depth_) {}
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  ~CompletionQueue();
  ibv_cq* get() const { return cq_; }
  int depth() const { return depth_; }

 private:
  CompletionQueue(ibv_cq* c, int depth) : cq_(c), depth_(depth) {}
  ibv_cq* cq_ = nullptr;
  int depth_ = 0;
};

// What the peer needs to connect a reliable-connection queue pair.
struct QueuePairInfo {
  uint32_t qp_num = 0;
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  uint32_t psn = 0;
};

// One ibv_modify_qp step: the attributes and the mask naming them. Built
// apart from the call so the values derived from the peer's info are
// unit-tested without a device.
struct QpTransition {
  ibv_qp_attr attr{};
  int mask = 0;
};
QpTransition InitTransition(uint8_t port);
// A zero GID means an InfiniBand peer addressed by LID alone; any other GID
// is routed (RoCE), so the address vector carries a global route header.
QpTransition RtrTransition(const QueuePairInfo& remote, uint8_t port);
QpTransition RtsTransition(uint32_t local_psn);

class QueuePair {
 public:
  static Result<QueuePair> Create(const ProtectionDomain& pd, const CompletionQueue& cq,
                                  uint32_t max_send_wr);
  QueuePair(QueuePair&& o) noexcept : qp_(std::exchange(o.qp_, nullptr)) {}
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  ~QueuePair();
  ibv_qp* get() const { return qp_; }
  Result<QueuePairInfo> LocalInfo(uint8_t port) const;
  // INIT -> RTR -> RTS against the peer's info.
  Status Connect(const QueuePairInfo& remote, uint8_t port, uint32_t local_psn);

 private:
  explicit QueuePair(ibv_qp* q) : qp_(q) {}
  ibv_qp* qp_ = nullptr;
};

// One thread polling one completion queue. Post() reserves a CQ entry first
// and fails with Busy when the queue could overflow; each completion runs
// its callback on the poller thread and releases its entry. The thread polls
// only while work it posted is outstanding: every completion answers such a
// request (no receives are posted), so an idle poller sleeps instead of
// spinning a core.
class CqPoller {
 public:
  using Callback = std::function<void(const Status&, uint32_t bytes)>;
  // Fills up to `max` completions into `wc`; the count, 0 if none, < 0 on error.
  using PollFn = std::function<int(int max, ibv_wc* wc)>;
  explicit CqPoller(CompletionQueue& cq);
  // Polls with `poll` (a device's CQ, or a test's), `depth` entries deep.
  CqPoller(PollFn poll, int depth);
  ~CqPoller();
  CqPoller(const CqPoller&) = delete;
  CqPoller& operator=(const CqPoller&) = delete;

  // Posts one signalled work request built by `post` (given its wr_id), on
  // behalf of `owner` (see NewOwner; 0 = none).
  Status Post(const std::function<int(uint64_t wr_id)>& post, Callback done, uint64_t owner = 0);

  // A tag for the requests of one queue pair.
  uint64_t NewOwner() { return next_owner_.fetch_add(1, std::memory_order_relaxed); }
  // After the owner's queue pair is destroyed (the device writes no more for
  // it, and a provider may drop its unpolled completions): ends the owner's
  // outstanding requests with Cancelled on this thread and gives their CQ
  // entries back, which would otherwise stay reserved for good.
  void Forget(uint64_t owner);

 private:
  struct Pending {
    uint64_t owner;
    Callback done;
  };
  void Run();
  static void Deliver(Callback& cb, const Status& st, uint32_t bytes) noexcept;

  PollFn poll_;
  std::atomic<int> free_slots_;
  std::mutex mu_;
  std::condition_variable work_;                     // a Post, or stop
  bool stop_ = false;                                // guarded by mu_
  uint64_t next_id_ = 1;                             // guarded by mu_
  std::unordered_map<uint64_t, Pending> callbacks_;  // guarded by mu_
  std::atomic<uint64_t> next_owner_{1};
  std::thread thread_;
};

}  // namespace kvtier::internal::rdma
