#include "io/worker_pool.h"

namespace kvtier::internal {

WorkerPool::WorkerPool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() { Shutdown(); }

Status WorkerPool::TrySubmit(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Status::Unavailable("worker pool is shut down");
    if (queue_.size() >= max_queued_) {
      return Status::Busy("request queue is full (" + std::to_string(max_queued_) + " queued)");
    }
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return Status::Ok();
}

void WorkerPool::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void WorkerPool::Run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

}  // namespace kvtier::internal
