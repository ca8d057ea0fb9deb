#include "kvtier/completion.h"

#include <gtest/gtest.h>

#include <thread>

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

TEST(Completion, EmptyHandleIsDone) {
  Completion c;
  EXPECT_TRUE(c.Poll());
  EXPECT_TRUE(c.Wait().ok());
  EXPECT_EQ(c.size(), 0u);
}

}  // namespace
}  // namespace kvtier
