// Statuses and completions while every allocation fails: a Status keeps its
// code (losing only its message), and a completion dropped or finished then
// still reports each item's failure and wakes its waiters, instead of ending
// the process from a destructor.
#include <gtest/gtest.h>

#include <future>
#include <optional>
#include <thread>

#include "kvtier/completion.h"
#include "kvtier/status.h"
#include "tests/core/alloc_failure.h"

namespace kvtier::testing {
namespace {

TEST(StatusAllocFailureTest, KeepsItsCodeWhenItsMessageCannotBeAllocated) {
  const Status with_message = Status::IOError("disk");
  FailEveryAllocation();
  const Status built = Status::Cancelled("request dropped");
  const Status copied = with_message;
  Status assigned;
  assigned = with_message;
  ASSERT_TRUE(DisarmAllocationFailures());
  EXPECT_EQ(built.code(), StatusCode::kCancelled);
  EXPECT_TRUE(built.message().empty());
  EXPECT_EQ(copied.code(), StatusCode::kIOError);
  EXPECT_EQ(assigned.code(), StatusCode::kIOError);
  EXPECT_EQ(with_message.ToString(), "io_error: disk");
}

TEST(StatusAllocFailureTest, ACodeWithoutAMessageAllocatesNothing) {
  FailEveryAllocation();
  const Status s(StatusCode::kBusy, "");
  const Status copy = s;
  EXPECT_FALSE(DisarmAllocationFailures());
  EXPECT_EQ(copy.code(), StatusCode::kBusy);
}

TEST(CompletionAllocFailureTest, ADroppedSourceCancelsEveryItem) {
  std::optional<CompletionSource> src(std::in_place, 3);
  const Completion c = src->completion();
  src->Set(1, Status::Ok(), 64);
  FailEveryAllocation();
  src.reset();  // threw bad_alloc out of the destructor, ending the process
  ASSERT_TRUE(DisarmAllocationFailures());
  ASSERT_TRUE(c.Poll());
  EXPECT_EQ(c.result(0).code(), StatusCode::kCancelled);
  EXPECT_TRUE(c.result(1).ok());
  EXPECT_EQ(c.bytes(1), 64u);
  EXPECT_EQ(c.result(2).code(), StatusCode::kCancelled);
  EXPECT_EQ(c.Wait().code(), StatusCode::kCancelled);
}

TEST(CompletionAllocFailureTest, FinishingWithItemsUnsetFailsThem) {
  CompletionSource src(2);
  const Completion c = src.completion();
  src.Set(0, Status::Ok());
  FailEveryAllocation();
  src.Finish();
  ASSERT_TRUE(DisarmAllocationFailures());
  ASSERT_TRUE(c.Poll());
  EXPECT_TRUE(c.result(0).ok());
  EXPECT_EQ(c.result(1).code(), StatusCode::kInternal);
}

// While Finish() runs the callbacks registered so far, one more (the
// runtime's, handed a tier call its deadline gave up on) still fits in the
// room kept for it: its registration used to allocate, and a failure there
// left the runtime counting a callback that would never run.
TEST(CompletionAllocFailureTest, ACallbackRegisteredWhileOthersRunAllocatesNothing) {
  CompletionSource src(1);
  const Completion c = src.completion();
  std::promise<void> running;
  std::promise<void> go_on;
  std::shared_future<void> released = go_on.get_future().share();
  c.OnDone([&running, released] {
    running.set_value();
    released.wait();
  });
  std::thread finisher([&] {
    src.Set(0, Status::Ok());
    src.Finish();
  });
  running.get_future().wait();
  bool late_ran = false;
  FailEveryAllocation();
  bool threw = false;
  try {
    c.OnDone([&late_ran] { late_ran = true; });
  } catch (...) {
    threw = true;
  }
  const bool injected = DisarmAllocationFailures();
  go_on.set_value();
  finisher.join();
  EXPECT_FALSE(threw) << "registering allocated";
  EXPECT_FALSE(injected);
  EXPECT_TRUE(late_ran);
  EXPECT_TRUE(c.Poll());
}

}  // namespace
}  // namespace kvtier::testing
