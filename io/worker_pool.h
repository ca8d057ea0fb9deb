// WorkerPool: a fixed set of threads serving a bounded job queue. A full queue
// refuses the job (Busy) instead of growing; Shutdown() runs every job already
// queued, then joins the threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

class WorkerPool {
 public:
  WorkerPool(size_t threads, size_t max_queued);
  ~WorkerPool();  // calls Shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `job`. Busy when the queue holds max_queued jobs; Unavailable
  // after Shutdown(). Thread-safe.
  Status TrySubmit(std::function<void()> job);

  // Stops accepting jobs, drains the queue and joins. Idempotent.
  void Shutdown();

 private:
  void Run();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::internal
