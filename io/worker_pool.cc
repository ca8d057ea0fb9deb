#include "io/worker_pool.h"

#include <exception>
#include <new>
#include <stdexcept>
#include <system_error>

namespace kvtier::internal {

WorkerPool::WorkerPool(size_t threads, size_t max_queued, std::shared_ptr<LogSink> log,
                       ThreadStarter start)
    : max_queued_(max_queued), log_(std::move(log)) {
  if (!start) start = [](std::function<void()> body) { return std::thread(std::move(body)); };
  // A thread that fails to start must not take the started ones down with
  // it (a joinable std::thread destroyed during unwinding terminates): the
  // vector is sized first, so emplace_back cannot reallocate, and only the
  // start itself can throw, before anything is added.
  try {
    threads_.reserve(threads);
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back(start([this] { Run(); }));
  } catch (const std::system_error& e) {
    // The details, if there is memory for them: nothing may throw past here.
    start_error_ =
        DescribedStatus(StatusCode::kResourceExhausted, "worker pool: a thread did not start", [&] {
          return Status::ResourceExhausted("worker pool: thread " +
                                           std::to_string(threads_.size() + 1) + " of " +
                                           std::to_string(threads) + " did not start: " + e.what());
        });
  } catch (const std::length_error&) {
    start_error_ =
        Status(StatusCode::kInvalidArgument, "worker pool: more threads than a vector can hold");
  } catch (const std::bad_alloc&) {
    start_error_ = Status(StatusCode::kResourceExhausted, "worker pool: out of memory for threads");
  }
  started_ = threads_.size();
  {
    std::lock_guard lock(mu_);  // the threads read it
    ordinary_limit_ = started_ > 1 ? started_ - 1 : 1;
  }
  if (!start_error_.ok() && log_ != nullptr) {
    try {
      log_->Log(LogLevel::kError, std::string(start_error_.message()) + "; serving with " +
                                      std::to_string(started_) + " threads");
    } catch (...) {  // the line is lost, not the pool
    }
  }
}

WorkerPool::~WorkerPool() { Shutdown(); }

Status WorkerPool::TrySubmit(std::function<void()> job, Lane lane) {
  if (started_ == 0) {
    return Status::Unavailable("worker pool has no thread: " + std::string(start_error_.message()));
  }
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Status::Unavailable("worker pool is shut down");
    auto& queue = lane == Lane::kUrgent ? urgent_ : queue_;
    if (queue.size() >= max_queued_) {
      return Status::Busy("request queue is full (" + std::to_string(max_queued_) + " queued)");
    }
    queue.push_back(std::move(job));
  }
  // Every waiter: the one woken must be one that may take this lane's job.
  cv_.notify_all();
  return Status::Ok();
}

void WorkerPool::Shutdown() {
  // The threads are taken out under the lock: a second caller finds none to
  // join (two joining one thread is undefined behaviour), and waits for the
  // first to finish joining them.
  std::lock_guard shutting(shutdown_mu_);
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) {
    if (t.joinable()) t.join();
  }
}

void WorkerPool::Run() {
  for (;;) {
    std::function<void()> job;
    bool ordinary = false;
    {
      std::unique_lock lock(mu_);
      const auto may_take_ordinary = [&] {
        return !queue_.empty() && ordinary_running_ < ordinary_limit_;
      };
      cv_.wait(lock, [&] {
        return !urgent_.empty() || may_take_ordinary() || (stopping_ && queue_.empty());
      });
      if (!urgent_.empty()) {
        job = std::move(urgent_.front());
        urgent_.pop_front();
      } else if (may_take_ordinary()) {
        job = std::move(queue_.front());
        queue_.pop_front();
        ordinary = true;
        ++ordinary_running_;
      } else {
        return;  // stopping and drained
      }
    }
    RunJob(job);
    if (ordinary) {
      {
        std::lock_guard lock(mu_);
        --ordinary_running_;
      }
      cv_.notify_all();  // a queued ordinary job may run now
    }
  }
}

// An exception escaping a thread's function terminates the process; a job
// that throws is the job's bug, and the pool keeps serving the others.
void WorkerPool::RunJob(std::function<void()>& job) {
  std::string what;
  try {
    job();
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  failed_jobs_.fetch_add(1, std::memory_order_relaxed);
  if (log_ != nullptr) {
    try {
      log_->Log(LogLevel::kError, "worker pool: a job threw " + what + "; the pool goes on");
    } catch (...) {
      // A sink that throws loses the message, not the worker.
    }
  }
}

}  // namespace kvtier::internal
