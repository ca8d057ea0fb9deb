#include "io/worker_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kvtier::internal {
namespace {

TEST(WorkerPool, FullQueueSaysBusyAndShutdownDrains) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> ran{0};
  WorkerPool pool(1, 2);
  auto blocker = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return release; });
    ran.fetch_add(1);
  };
  ASSERT_TRUE(pool.TrySubmit(blocker).ok());
  // The worker may or may not have taken the first job yet: fill until Busy.
  int queued = 1;
  Status st;
  while ((st = pool.TrySubmit([&] { ran.fetch_add(1); })).ok()) ++queued;
  EXPECT_EQ(st.code(), StatusCode::kBusy);
  EXPECT_LE(queued, 3);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  pool.Shutdown();
  EXPECT_EQ(ran.load(), queued);
  EXPECT_EQ(pool.TrySubmit([] {}).code(), StatusCode::kUnavailable);
}

// Two threads shutting one pool down at once: both return, each only once
// the job still running has ended, and no thread is joined twice (which
// both callers used to try).
TEST(WorkerPool, TwoShutdownsAtOnceBothWaitForTheJobs) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> ran{false};
  WorkerPool pool(2, 4);
  ASSERT_TRUE(pool.TrySubmit([&] {
                    std::unique_lock lock(mu);
                    cv.wait(lock, [&] { return release; });
                    ran = true;
                  })
                  .ok());
  std::atomic<int> returned{0}, returned_early{0};
  auto shut = [&] {
    pool.Shutdown();
    if (!ran.load()) returned_early.fetch_add(1);
    returned.fetch_add(1);
  };
  std::thread a(shut), b(shut);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(returned.load(), 0) << "a Shutdown returned while a job still ran";
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  a.join();
  b.join();
  EXPECT_EQ(returned.load(), 2);
  EXPECT_EQ(returned_early.load(), 0);
}

// Ordinary jobs that block (saves waiting for hub room) held every thread,
// and a load queued behind them waited for all of them: 2 s past its 50 ms
// deadline with four saves queued. Urgent jobs go first, and ordinary ones
// leave a thread free for them.
TEST(WorkerPool, UrgentJobsRunWhileOrdinaryOnesBlock) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int ordinary_running = 0, most_ordinary = 0, ordinary_ran = 0;
  WorkerPool pool(3, 16);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(pool.TrySubmit([&] {
                      std::unique_lock lock(mu);
                      most_ordinary = std::max(most_ordinary, ++ordinary_running);
                      cv.notify_all();
                      cv.wait(lock, [&] { return release; });
                      --ordinary_running;
                      ++ordinary_ran;
                    })
                    .ok());
  }
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return ordinary_running == 2; }));
  }
  // Two of three threads hold ordinary jobs; the third serves urgent ones,
  // one after another, while the ordinary jobs stay blocked.
  std::atomic<int> urgent_ran{0};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pool.TrySubmit([&] { urgent_ran.fetch_add(1); }, WorkerPool::Lane::kUrgent).ok());
  }
  for (int i = 0; i < 1000 && urgent_ran.load() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(urgent_ran.load(), 4);
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(ordinary_running, 2);
    release = true;
  }
  cv.notify_all();
  pool.Shutdown();
  EXPECT_EQ(ordinary_ran, 6);
  EXPECT_EQ(most_ordinary, 2);
}

// With one thread there is none to keep: ordinary jobs run on it, and each
// lane has its own bound.
TEST(WorkerPool, OneThreadServesBothLanesEachBounded) {
  WorkerPool pool(1, 1);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, started = false;
  ASSERT_TRUE(pool.TrySubmit([&] {
                    std::unique_lock lock(mu);
                    started = true;
                    cv.notify_all();
                    cv.wait(lock, [&] { return release; });
                  })
                  .ok());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return started; }));
  }
  std::atomic<int> ran{0};
  EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }).ok());
  EXPECT_EQ(pool.TrySubmit([&] { ran.fetch_add(1); }).code(), StatusCode::kBusy);
  EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(10); }, WorkerPool::Lane::kUrgent).ok());
  EXPECT_EQ(pool.TrySubmit([] {}, WorkerPool::Lane::kUrgent).code(), StatusCode::kBusy);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 11);
}

}  // namespace
}  // namespace kvtier::internal
