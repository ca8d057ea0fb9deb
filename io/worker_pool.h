// WorkerPool: a fixed set of threads serving two bounded job queues. Urgent
// jobs are served first, and ordinary jobs never hold every thread (with two
// threads or more one is kept for urgent jobs), so an urgent job waits only
// for other urgent jobs. A full queue refuses the job (Busy) instead of
// growing; Shutdown() runs every job already queued, then joins the threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::internal {

class WorkerPool {
 public:
  // Starts one thread running `body`; throws std::system_error when the
  // system refuses (the default is std::thread's constructor).
  using ThreadStarter = std::function<std::thread(std::function<void()> body)>;

  // Starts up to `threads` threads. A thread the system refuses to start is
  // not fatal: the pool serves with those that started (threads() says how
  // many, start_error() why the rest did not). With none, TrySubmit answers
  // Unavailable. A job that throws is counted (failed_jobs()) and logged to
  // `log` when set; the worker goes on with the next job.
  WorkerPool(size_t threads, size_t max_queued, std::shared_ptr<LogSink> log = nullptr,
             ThreadStarter start = nullptr);
  ~WorkerPool();  // calls Shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  enum class Lane { kOrdinary, kUrgent };

  // Queues `job` in `lane`. Busy when that lane's queue holds max_queued
  // jobs; Unavailable after Shutdown() or when no thread started.
  // Thread-safe.
  Status TrySubmit(std::function<void()> job, Lane lane = Lane::kOrdinary);

  // Stops accepting jobs, drains the queue and joins. Idempotent.
  void Shutdown();

  // Threads started by the constructor (fewer than asked when one failed).
  size_t threads() const { return started_; }
  // Why a thread failed to start; OK when all did.
  const Status& start_error() const { return start_error_; }
  // Jobs that ended by throwing. Thread-safe.
  uint64_t failed_jobs() const { return failed_jobs_.load(std::memory_order_relaxed); }

 private:
  void Run();
  void RunJob(std::function<void()>& job);

  const size_t max_queued_;
  const std::shared_ptr<LogSink> log_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;   // ordinary jobs; guarded by mu_
  std::deque<std::function<void()>> urgent_;  // guarded by mu_
  size_t ordinary_running_ = 0;               // guarded by mu_
  size_t ordinary_limit_ = 1;                 // threads ordinary jobs may hold; guarded by mu_
  bool stopping_ = false;                     // guarded by mu_
  std::vector<std::thread> threads_;          // taken out under mu_ by Shutdown
  // Held through Shutdown: a second caller returns once the first has
  // joined every thread, having found none left to join.
  std::mutex shutdown_mu_;
  size_t started_ = 0;                    // written by the constructor only
  Status start_error_;                    // written by the constructor only
  std::atomic<uint64_t> failed_jobs_{0};  // a statistic: relaxed
};

}  // namespace kvtier::internal
