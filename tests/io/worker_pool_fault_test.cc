// WorkerPool under failure: a job that throws, a thread the system refuses
// to start, and a thread count no vector can hold. None may end the process.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "io/worker_pool.h"

namespace kvtier::internal {
namespace {

class RecordingSink final : public LogSink {
 public:
  void Log(LogLevel, std::string_view message) override {
    std::lock_guard lock(mu_);
    lines_.emplace_back(message);
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// Starts threads normally until `fail_from` have started, then refuses.
WorkerPool::ThreadStarter FailFrom(size_t fail_from, std::atomic<size_t>* calls) {
  return [=](std::function<void()> body) {
    if (calls->fetch_add(1) >= fail_from) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    }
    return std::thread(std::move(body));
  };
}

TEST(WorkerPoolFaultTest, JobThatThrowsIsCountedAndThePoolGoesOn) {
  auto sink = std::make_shared<RecordingSink>();
  std::atomic<int> ran{0};
  WorkerPool pool(1, 8, sink);
  ASSERT_TRUE(pool.TrySubmit([] { throw std::runtime_error("boom"); }).ok());
  ASSERT_TRUE(pool.TrySubmit([] { throw 42; }).ok());
  ASSERT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }).ok());
  pool.Shutdown();  // drains: the job after the throwing ones still runs
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(pool.failed_jobs(), 2u);
  const std::vector<std::string> lines = sink->lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "worker pool: a job threw boom; the pool goes on");
  EXPECT_EQ(lines[1],
            "worker pool: a job threw an exception that is not a std::exception; the pool goes on");
}

TEST(WorkerPoolFaultTest, ThreadThatFailsToStartLeavesAServingPool) {
  std::atomic<size_t> calls{0};
  auto sink = std::make_shared<RecordingSink>();
  WorkerPool pool(4, 8, sink, FailFrom(2, &calls));
  EXPECT_EQ(pool.threads(), 2u);
  EXPECT_EQ(pool.start_error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(pool.start_error().message()).find("thread 3 of 4 did not start"),
            std::string::npos)
      << pool.start_error().ToString();
  ASSERT_EQ(sink->lines().size(), 1u);
  EXPECT_NE(sink->lines()[0].find("serving with 2 threads"), std::string::npos);
  std::atomic<int> ran{0};
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }).ok());
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 4);
}

TEST(WorkerPoolFaultTest, NoThreadStartedRefusesJobs) {
  std::atomic<size_t> calls{0};
  WorkerPool pool(2, 8, nullptr, FailFrom(0, &calls));
  EXPECT_EQ(pool.threads(), 0u);
  Status st = pool.TrySubmit([] {});
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(std::string(st.message()).find("worker pool has no thread: "), std::string::npos)
      << st.ToString();
  pool.Shutdown();
}

TEST(WorkerPoolFaultTest, ImpossibleThreadCountIsAnErrorNotAnException) {
  std::unique_ptr<WorkerPool> pool;
  ASSERT_NO_THROW(pool = std::make_unique<WorkerPool>(std::numeric_limits<size_t>::max(), 8));
  EXPECT_EQ(pool->threads(), 0u);
  EXPECT_EQ(pool->start_error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->TrySubmit([] {}).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvtier::internal
