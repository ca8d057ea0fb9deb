#include "io/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

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

}  // namespace
}  // namespace kvtier::internal
