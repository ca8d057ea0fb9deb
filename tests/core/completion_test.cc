#include "kvtier/completion.h"

#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/returns_within.h"

namespace kvtier {
namespace {

TEST(Completion, ResultsAndAggregateStatus) {
  CompletionSource src(3);
  Completion c = src.completion();
  EXPECT_FALSE(c.Poll());
  src.Set(0, Status::Ok(), 10);
  src.Set(1, Status::NotFound("miss"));
  src.Set(1, Status::Ok(), 5);  // a second result for an item is ignored
  src.Set(2, Status::Ok(), 30);
  src.Finish();
  ASSERT_TRUE(c.Poll());
  EXPECT_EQ(c.ok_count(), 2u);
  EXPECT_EQ(c.bytes(0), 10u);
  EXPECT_EQ(c.result(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

TEST(Completion, DroppedSourceCancelsSoNobodyHangs) {
  Completion c;
  {
    CompletionSource src(2);
    c = src.completion();
    src.Set(0, Status::Ok());
  }
  ASSERT_TRUE(c.Poll());
  EXPECT_TRUE(c.result(0).ok());
  EXPECT_EQ(c.result(1).code(), StatusCode::kCancelled);
}

TEST(Completion, UnsetItemsBecomeInternalOnFinish) {
  CompletionSource src(2);
  src.Set(0, Status::Ok());
  src.Finish();
  EXPECT_EQ(src.completion().result(1).code(), StatusCode::kInternal);
}

TEST(Completion, WaitForTimesOutThenCompletesAndCallbacksRunOnce) {
  CompletionSource src(1);
  Completion c = src.completion();
  EXPECT_EQ(c.WaitFor(std::chrono::milliseconds(5)).code(), StatusCode::kDeadlineExceeded);
  int calls = 0;
  c.OnDone([&] { ++calls; });
  std::thread t([&] {
    src.Set(0, Status::Ok(), 1);
    src.Finish();
    src.Finish();
  });
  EXPECT_TRUE(c.Wait().ok());
  t.join();
  EXPECT_EQ(calls, 1);
  c.OnDone([&] { ++calls; });  // already done: runs at once
  EXPECT_EQ(calls, 2);
}

// nanoseconds::max() is how a caller says "no deadline": added to now() it
// would wrap into the past and the wait would end at once, while the work
// (a copy into the caller's pages, say) is still running.
TEST(Completion, WaitForWithTheLargestTimeoutWaitsUntilDone) {
  CompletionSource src(1);
  Completion c = src.completion();
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    src.Set(0, Status::Ok(), 1);
    src.Finish();
  });
  EXPECT_TRUE(c.WaitFor(std::chrono::nanoseconds::max()).ok());
  EXPECT_TRUE(c.Poll());
  t.join();
}

// A call refused before it had any item still says why.
TEST(Completion, DoneWithNoItemsKeepsItsError) {
  Completion refused = CompletionSource::Done(0, Status::InvalidArgument("bad call"));
  EXPECT_TRUE(refused.Poll());
  EXPECT_EQ(refused.size(), 0u);
  EXPECT_EQ(refused.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CompletionSource::Done(0, Status::Ok()).Wait().ok());
}

// A callback that throws on the finishing thread: the other callbacks still
// run and the waiters still wake (they slept forever, and the finishing
// thread died with the exception).
TEST(Completion, ACallbackThatThrowsDoesNotStrandTheWaiters) {
  CompletionSource src(1);
  Completion c = src.completion();
  int ran = 0;
  c.OnDone([] { throw std::runtime_error("engine bug"); });
  c.OnDone([&] { ++ran; });
  std::thread t([&] {
    src.Set(0, Status::Ok(), 1);
    src.Finish();
  });
  EXPECT_TRUE(c.Wait().ok());
  t.join();
  EXPECT_EQ(ran, 1);
}

// A callback registered from another thread while the finishing thread
// runs the earlier ones waits its turn: it used to run at once, overtaking
// them (the Python binding frees what earlier callbacks use from the one it
// registers last). Both run before Wait() returns.
TEST(Completion, ACallbackRegisteredWhileCallbacksRunRunsAfterThem) {
  CompletionSource src(1);
  Completion c = src.completion();
  std::mutex mu;
  std::vector<std::string> order;
  std::promise<void> first_running, second_registered;
  std::shared_future<void> registered = second_registered.get_future().share();
  c.OnDone([&, registered] {
    first_running.set_value();
    registered.wait();
    std::lock_guard lock(mu);
    order.push_back("first");
  });
  std::thread finisher([&] {
    src.Set(0, Status::Ok());
    src.Finish();
  });
  first_running.get_future().wait();
  std::thread::id ran_on;
  c.OnDone([&] {
    std::lock_guard lock(mu);
    order.push_back("second");
    ran_on = std::this_thread::get_id();
  });
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(order.empty()) << "the second callback overtook the first";
  }
  second_registered.set_value();
  EXPECT_TRUE(c.Wait().ok());
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
    EXPECT_EQ(ran_on, finisher.get_id());
  }
  finisher.join();
  // Once done, a callback runs at once, here.
  bool now = false;
  c.OnDone([&] { now = true; });
  EXPECT_TRUE(now);
}

// A callback reading its own completion (the Python binding's results()
// waits first) must not wait for itself: on the finishing thread the
// results are final, so Poll, Wait and WaitFor answer at once there, while
// other threads still wait for the callbacks to end.
TEST(Completion, ACallbackReadsItsOwnCompletionWithoutWaitingForItself) {
  CompletionSource src(2);
  Completion c = src.completion();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  bool polled = false;
  Status waited = Status::Internal("not run"), waited_for = Status::Internal("not run");
  uint64_t bytes = 0;
  c.OnDone([&, released] {
    polled = c.Poll();
    waited = c.Wait();
    waited_for = c.WaitFor(std::chrono::seconds(1));
    bytes = c.bytes(0) + c.bytes(1);
    released.wait();
  });
  std::thread finisher([&] {
    src.Set(0, Status::Ok(), 3);
    src.Set(1, Status::NotFound("miss"), 0);
    src.Finish();
  });
  EXPECT_EQ(c.WaitFor(std::chrono::milliseconds(100)).code(), StatusCode::kDeadlineExceeded)
      << "another thread saw it done while its callback ran";
  EXPECT_FALSE(c.Poll());
  release.set_value();
  EXPECT_TRUE(testing::ReturnsWithin([&] { (void)c.Wait(); }, std::chrono::seconds(5),
                                     "a wait on a completion whose callback read it"));
  EXPECT_EQ(c.Wait().code(), StatusCode::kNotFound);
  finisher.join();
  EXPECT_TRUE(polled);
  EXPECT_EQ(waited.code(), StatusCode::kNotFound);
  EXPECT_EQ(waited_for.code(), StatusCode::kNotFound);
  EXPECT_EQ(bytes, 3u);
}

TEST(Completion, EmptyHandleIsDone) {
  Completion c;
  EXPECT_TRUE(c.Poll());
  EXPECT_TRUE(c.Wait().ok());
  EXPECT_EQ(c.size(), 0u);
}

}  // namespace
}  // namespace kvtier
