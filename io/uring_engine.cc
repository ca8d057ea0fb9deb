// The io_uring engine. One thread owns the ring: it moves queued requests
// into the ring, each linked to an IORING_OP_LINK_TIMEOUT, submits, and reaps
// completions. Other threads only touch the bounded queue and an eventfd
// whose pending read (armed in the ring) wakes the owner.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "io/fixed_buffers.h"
#include "io/io_engine.h"
#include "io/ring.h"

namespace kvtier::internal {

std::string_view IoOpName(IoOp op) {
  switch (op) {
    case IoOp::kRead:
      return "read";
    case IoOp::kWrite:
      return "write";
    case IoOp::kFsync:
      return "fsync";
  }
  return "?";
}

namespace {

using SteadyClock = std::chrono::steady_clock;
using ThreadStarter = std::function<std::thread(std::function<void()> body)>;
// Tests: a nonzero answer replaces one submit-and-wait's result unsubmitted.
using WaitFault = std::function<int()>;

// user_data tags that are not request pointers (those are 8-byte aligned).
constexpr uint64_t kWakeTag = 1;
constexpr uint64_t kTimeoutTag = 3;
// Longest pause between submits the kernel refused for want of memory.
constexpr int kMaxSubmitPauseMs = 16;

struct Inflight {
  IoRequest req;
  uint64_t expected = 0;
  uint64_t moved = 0;
  uint32_t eagain = 0;
  bool issued = false;
  // Time the request may spend queued before the ring has room for it.
  SteadyClock::time_point queue_deadline;
  uint64_t queue_wait_ms = 0;
  SteadyClock::time_point deadline;  // the device's, set when first issued
  __kernel_timespec ts{};
};

__kernel_timespec ToTimespec(SteadyClock::duration d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  return {ns / 1000000000, ns % 1000000000};
}

std::string Where(const IoRequest& r) {
  return "io_uring " + std::string(IoOpName(r.op)) + " at offset " + std::to_string(r.offset);
}

// Drops the first `n` bytes of `iov`.
void Advance(std::vector<iovec>& iov, uint64_t n) {
  size_t i = 0;
  while (i < iov.size() && n >= iov[i].iov_len) n -= iov[i++].iov_len;
  iov.erase(iov.begin(), iov.begin() + static_cast<long>(i));
  if (!iov.empty() && n > 0) {
    iov[0].iov_base = static_cast<char*>(iov[0].iov_base) + n;
    iov[0].iov_len -= n;
  }
}

class UringEngine final : public IoEngine {
 public:
  UringEngine(const UringEngineOptions& o, Ring ring, int wake_fd, const ThreadStarter& start,
              WaitFault wait_fault)
      : options_(o), ring_(std::move(ring)), wake_fd_(wake_fd), wait_fault_(std::move(wait_fault)) {
    thread_ = start ? start([this] { Loop(); }) : std::thread([this] { Loop(); });
  }
  ~UringEngine() override {
    Shutdown();
    close(wake_fd_);
  }

  Status Submit(std::vector<IoRequest> requests) override {
    // Everything is allocated before anything is queued; splice moves the
    // nodes without allocating, so the batch is queued whole or not at all.
    std::list<std::unique_ptr<Inflight>> batch;
    try {
      for (IoRequest& r : requests) {
        auto f = std::make_unique<Inflight>();
        f->expected = r.Bytes();
        f->req = std::move(r);
        batch.push_back(std::move(f));
      }
    } catch (const std::bad_alloc&) {
      // A fixed message: building one would need the memory that ran out.
      return Status::ResourceExhausted("io engine: out of memory queueing requests");
    }
    {
      std::lock_guard lock(mu_);
      if (stopping_) return Status::Unavailable("io engine is shut down");
      if (queue_.size() + batch.size() > options_.max_queued) {
        return Status::Busy("io engine queue is full (" + std::to_string(options_.max_queued) +
                            " requests)");
      }
      // A request may wait while the requests ahead of it each take up to
      // timeout_ms in the device: one round for those in flight, one per
      // queue_depth queued ahead, plus one round of slack. Deadlines never
      // decrease along the queue, so the loop checks only its front.
      const auto now = SteadyClock::now();
      size_t ahead = queue_.size();
      for (auto& f : batch) {
        f->queue_wait_ms = uint64_t{options_.timeout_ms} * (2 + ahead++ / options_.queue_depth);
        last_queue_deadline_ =
            std::max(last_queue_deadline_, now + std::chrono::milliseconds(f->queue_wait_ms));
        f->queue_deadline = last_queue_deadline_;
      }
      queue_.splice(queue_.end(), batch);
    }
    Wake();
    return Status::Ok();
  }

  void Shutdown() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    Wake();
    std::call_once(join_once_, [this] { thread_.join(); });
  }

  // io_uring_register only reads the ring's fd, so it may run on a thread
  // other than the owner; the table is published once, with release order,
  // and never changes afterwards.
  uint64_t RegisterBuffers(std::span<const iovec> ranges) override {
    std::lock_guard lock(register_mu_);
    if (buffers_tried_) return 0;
    buffers_tried_ = true;
    for (uint64_t budget : RegistrationBudgets(IovecBytes(ranges))) {
      std::vector<iovec> chunks = FixedChunks(ranges, budget);
      if (chunks.empty()) break;
      if (!ring_.RegisterBuffers(chunks.data(), static_cast<unsigned>(chunks.size())).ok()) {
        continue;
      }
      fixed_ = std::move(chunks);
      fixed_ready_.store(true, std::memory_order_release);
      return IovecBytes(fixed_);
    }
    return 0;
  }

  bool IsRegistered(const void* p, uint64_t len) const override { return FixedIndex(p, len) >= 0; }

  Status RegisterFile(int fd) override {
    std::lock_guard lock(register_mu_);
    if (fixed_fd_.load(std::memory_order_relaxed) >= 0) {
      return Status::InvalidArgument("io engine: a fixed file is already registered");
    }
    KVTIER_RETURN_IF_ERROR(ring_.RegisterFile(fd));
    fixed_fd_.store(fd, std::memory_order_release);
    return Status::Ok();
  }

  uint64_t FixedBufferIos() const override { return fixed_ios_.load(std::memory_order_relaxed); }

 private:
  // Index of the registered buffer holding [p, p + len), or -1.
  int FixedIndex(const void* p, uint64_t len) const {
    if (!fixed_ready_.load(std::memory_order_acquire)) return -1;
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = std::upper_bound(fixed_.begin(), fixed_.end(), a, [](uintptr_t x, const iovec& v) {
      return x < reinterpret_cast<uintptr_t>(v.iov_base);
    });
    if (it == fixed_.begin()) return -1;
    --it;
    const auto base = reinterpret_cast<uintptr_t>(it->iov_base);
    if (a + len > base + it->iov_len) return -1;
    return static_cast<int>(it - fixed_.begin());
  }

  // Fills `sqe` for the request: READ_FIXED / WRITE_FIXED when its one
  // buffer is registered, the registered file index when its fd is.
  void PrepOp(io_uring_sqe* sqe, const IoRequest& r) {
    const auto n = static_cast<unsigned>(r.iov.size());
    const int buf = n == 1 ? FixedIndex(r.iov[0].iov_base, r.iov[0].iov_len) : -1;
    switch (r.op) {
      case IoOp::kRead:
        if (buf >= 0) {
          io_uring_prep_read_fixed(sqe, r.fd, r.iov[0].iov_base,
                                   static_cast<unsigned>(r.iov[0].iov_len), r.offset, buf);
        } else {
          io_uring_prep_readv(sqe, r.fd, r.iov.data(), n, r.offset);
        }
        break;
      case IoOp::kWrite:
        if (buf >= 0) {
          io_uring_prep_write_fixed(sqe, r.fd, r.iov[0].iov_base,
                                    static_cast<unsigned>(r.iov[0].iov_len), r.offset, buf);
        } else {
          io_uring_prep_writev(sqe, r.fd, r.iov.data(), n, r.offset);
        }
        break;
      case IoOp::kFsync:
        io_uring_prep_fsync(sqe, r.fd, IORING_FSYNC_DATASYNC);
        break;
    }
    if (buf >= 0 && r.op != IoOp::kFsync) fixed_ios_.fetch_add(1, std::memory_order_relaxed);
    if (r.fd >= 0 && r.fd == fixed_fd_.load(std::memory_order_acquire)) {
      sqe->fd = 0;
      sqe->flags |= IOSQE_FIXED_FILE;
    }
  }

  void Wake() {
    eventfd_t one = 1;
    (void)eventfd_write(wake_fd_, one);
  }

  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    io_uring_prep_read(sqe, wake_fd_, &wake_buf_, sizeof(wake_buf_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void Loop() {
    ArmWake();
    // Sized once: at most queue_depth requests are in flight, so the loop
    // itself does not allocate.
    std::vector<Inflight*> retry, batch;
    retry.reserve(options_.queue_depth);
    batch.reserve(options_.queue_depth);
    std::list<std::unique_ptr<Inflight>> expired;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      bool stop;
      auto next_expiry = SteadyClock::time_point::max();
      {
        std::lock_guard lock(mu_);
        while (!queue_.empty() && in_flight_ + batch.size() < options_.queue_depth) {
          batch.push_back(queue_.front().release());
          queue_.pop_front();
        }
        const auto now = SteadyClock::now();
        auto it = queue_.begin();
        while (it != queue_.end() && (*it)->queue_deadline <= now) ++it;
        expired.splice(expired.end(), queue_, queue_.begin(), it);
        if (!queue_.empty()) next_expiry = queue_.front()->queue_deadline;
        stop = stopping_ && queue_.empty();
      }
      for (auto& f : expired) {
        ++in_flight_;
        Status st = NeverIssued(*f);
        Finish(f.release(), std::move(st));
      }
      expired.clear();
      for (Inflight* f : retry) Prep(f);
      retry.clear();
      for (Inflight* f : batch) {
        ++in_flight_;
        Prep(f);
      }
      batch.clear();
      if (stop && in_flight_ == 0) break;
      int rc = Wait(next_expiry);
      if (rc == -EAGAIN || rc == -ENOMEM) {
        // The kernel had no memory for the new entries and took none of
        // them: what it already holds completes as usual, the entries stay
        // in the ring for the next submit, and queued requests keep their
        // never-issued deadlines.
        Reap(retry);
        std::this_thread::sleep_for(pause);
        pause = std::min(2 * pause, std::chrono::milliseconds(kMaxSubmitPauseMs));
        continue;
      }
      if (rc < 0 && rc != -EINTR && rc != -EBUSY && rc != -ETIME) {
        FailAll(Described(StatusCode::kIOError,
                          [&] { return FromErrno(-rc, "io_uring_submit_and_wait"); }));
        // What the kernel completed is still reaped (that needs no system
        // call), and a submit that keeps failing is retried after a pause,
        // not in a spin.
        Reap(retry);
        std::this_thread::sleep_for(pause);
        pause = std::min(2 * pause, std::chrono::milliseconds(kMaxSubmitPauseMs));
        continue;
      }
      pause = std::chrono::milliseconds(1);
      Reap(retry);
    }
  }

  // Submits and waits for a completion, or until `until` (when queued
  // requests must be failed even though every slot holds I/O the kernel
  // cannot cancel).
  int Wait(SteadyClock::time_point until) {
    if (wait_fault_) {
      if (int rc = wait_fault_(); rc != 0) return rc;
    }
    if (until == SteadyClock::time_point::max()) return io_uring_submit_and_wait(ring_.get(), 1);
    __kernel_timespec ts =
        ToTimespec(std::max(until - SteadyClock::now(), SteadyClock::duration::zero()));
    io_uring_cqe* cqe = nullptr;
    return io_uring_submit_and_wait_timeout(ring_.get(), &cqe, 1, &ts, nullptr);
  }

  // The status `describe()` builds, or `code` with a fixed message when
  // memory runs out building it: the loop's thread must not throw.
  template <typename Describe>
  static Status Described(StatusCode code, const Describe& describe) noexcept {
    return DescribedStatus(code, "io engine: request failed (out of memory describing how)",
                           describe);
  }

  Status NeverIssued(const Inflight& f) const noexcept {
    return Described(StatusCode::kDeadlineExceeded, [&] {
      return Status::DeadlineExceeded(
          Where(f.req) + ": never issued: waited " + std::to_string(f.queue_wait_ms) +
          " ms while all " + std::to_string(options_.queue_depth) + " slots held earlier I/O");
    });
  }

  Status TimedOut(const IoRequest& r) const noexcept {
    return Described(StatusCode::kDeadlineExceeded, [&] {
      return Status::DeadlineExceeded(Where(r) + ": no completion within " +
                                      std::to_string(options_.timeout_ms) + " ms");
    });
  }

  // Puts one request (and its linked timeout) into the ring, or completes it
  // at once when its deadline has passed. The deadline starts at the first
  // issue and holds for resubmissions (short I/O, -EAGAIN).
  void Prep(Inflight* f) {
    const auto now = SteadyClock::now();
    if (!f->issued) {
      f->issued = true;
      f->deadline = now + std::chrono::milliseconds(options_.timeout_ms);
    }
    const auto left = f->deadline - now;
    if (left <= SteadyClock::duration::zero()) {
      Finish(f, TimedOut(f->req));
      return;
    }
    f->ts = ToTimespec(left);
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) {
      io_uring_submit(ring_.get());
      sqe = io_uring_get_sqe(ring_.get());
    }
    PrepOp(sqe, f->req);
    sqe->flags |= IOSQE_IO_LINK;
    io_uring_sqe_set_data(sqe, f);
    io_uring_sqe* tsqe = io_uring_get_sqe(ring_.get());
    if (tsqe == nullptr) {
      io_uring_submit(ring_.get());
      tsqe = io_uring_get_sqe(ring_.get());
    }
    io_uring_prep_link_timeout(tsqe, &f->ts, 0);
    io_uring_sqe_set_data64(tsqe, kTimeoutTag);
  }

  void Reap(std::vector<Inflight*>& retry) {
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(ring_.get(), head, cqe) {
      ++seen;
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      // LIBURING_UDATA_TIMEOUT: the wait's own timeout on kernels without
      // IORING_FEAT_EXT_ARG.
      if (tag == kTimeoutTag || tag == LIBURING_UDATA_TIMEOUT) continue;
      if (tag == kWakeTag) {
        rearm_wake_ = true;
        continue;
      }
      Handle(static_cast<Inflight*>(io_uring_cqe_get_data(cqe)), cqe->res, retry);
    }
    io_uring_cq_advance(ring_.get(), seen);
    if (rearm_wake_) {
      rearm_wake_ = false;
      ArmWake();
    }
  }

  void Handle(Inflight* f, int res, std::vector<Inflight*>& retry) {
    const IoRequest& r = f->req;
    if (res == -EAGAIN && f->eagain < options_.eagain_retries) {
      ++f->eagain;
      retry.push_back(f);
      return;
    }
    if (res == -ECANCELED) {
      Finish(f, TimedOut(r));
      return;
    }
    if (res < 0) {
      Finish(f, Described(StatusCode::kIOError, [&] { return FromErrno(-res, Where(r)); }));
      return;
    }
    f->moved += static_cast<uint64_t>(res);
    if (r.op == IoOp::kFsync || f->moved >= f->expected) {
      Finish(f, Status::Ok());
      return;
    }
    if (res == 0) {  // end of file or a device that moves nothing
      Finish(f, Described(StatusCode::kIOError, [&] {
               return Status::IOError(Where(r) + ": short " + std::string(IoOpName(r.op)) + ": " +
                                      std::to_string(f->moved) + " of " +
                                      std::to_string(f->expected) + " bytes");
             }));
      return;
    }
    Advance(f->req.iov, static_cast<uint64_t>(res));
    f->req.offset += static_cast<uint64_t>(res);
    retry.push_back(f);
  }

  // What `done` throws is dropped (the engine has no log sink): the request
  // is complete either way, and the thread must go on serving the others.
  void Finish(Inflight* f, Status status) {
    std::unique_ptr<Inflight> owned(f);
    --in_flight_;
    IoCompletion c{f->req.id, std::move(status), f->moved};
    if (!f->req.done) return;
    try {
      f->req.done(c);
    } catch (...) {
    }
  }

  // The ring itself failed: complete everything queued with the error.
  void FailAll(const Status& st) {
    std::list<std::unique_ptr<Inflight>> q;
    {
      std::lock_guard lock(mu_);
      q.swap(queue_);
    }
    for (auto& f : q) {
      ++in_flight_;
      Finish(f.release(), st);
    }
  }

  const UringEngineOptions options_;
  Ring ring_;  // thread_ only, but for the io_uring_register calls above
  const int wake_fd_;
  eventfd_t wake_buf_ = 0;
  bool rearm_wake_ = false;
  const WaitFault wait_fault_;
  uint32_t in_flight_ = 0;  // thread_ only

  std::mutex register_mu_;      // serialises registrations
  bool buffers_tried_ = false;  // guarded by register_mu_
  std::vector<iovec> fixed_;    // set once, before fixed_ready_
  std::atomic<bool> fixed_ready_{false};
  std::atomic<int> fixed_fd_{-1};
  std::atomic<uint64_t> fixed_ios_{0};

  std::mutex mu_;
  std::list<std::unique_ptr<Inflight>> queue_;   // guarded by mu_
  SteadyClock::time_point last_queue_deadline_;  // guarded by mu_
  bool stopping_ = false;                        // guarded by mu_
  std::once_flag join_once_;
  std::thread thread_;
};

}  // namespace

// `start` null: a plain std::thread; `wait_fault` null: none.
Result<std::unique_ptr<IoEngine>> TEST_NewUringEngine(const UringEngineOptions& options,
                                                      ThreadStarter start, WaitFault wait_fault) {
  if (options.queue_depth == 0 || options.max_queued == 0 || options.timeout_ms == 0) {
    return Status::InvalidArgument("io engine: queue_depth, max_queued and timeout_ms must be > 0");
  }
  // Two entries per request (the operation and its linked timeout) plus the
  // wake read.
  KVTIER_ASSIGN_OR_RETURN(Ring ring, Ring::Create(2 * options.queue_depth + 2));
  int fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0) return FromErrno(errno, "eventfd");
  try {
    return std::unique_ptr<IoEngine>(
        new UringEngine(options, std::move(ring), fd, start, std::move(wait_fault)));
  } catch (const std::exception& e) {  // std::system_error from the thread, or bad_alloc
    close(fd);
    return Status::ResourceExhausted(std::string("io engine: could not start its thread: ") +
                                     e.what());
  }
}

Result<std::unique_ptr<IoEngine>> NewUringEngine(const UringEngineOptions& options) {
  return TEST_NewUringEngine(options, nullptr, nullptr);
}

}  // namespace kvtier::internal
