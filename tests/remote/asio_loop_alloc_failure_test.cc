// AsioLoop::Call when the call throws and the loop thread has no memory to
// describe it: the caller is still answered (Internal, without the detail);
// it used to wait for good, the answer lost with a second throw.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <new>

#include "io/asio_loop.h"
#include "tests/core/alloc_failure.h"

namespace kvtier::testing {
namespace {

TEST(AsioLoopAllocFailureTest, ACallThatThrowsWithoutMemoryStillAnswers) {
  internal::AsioLoop loop("alloc-test", nullptr);
  auto answered = std::async(std::launch::async, [&loop] {
    return loop.Call([] {
      FailAllocationsOnThisThread(true);  // the loop thread, until the next call
      throw std::bad_alloc();
    });
  });
  ASSERT_EQ(answered.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "Call never returned";
  const Status st = answered.get();
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
  // The loop goes on serving once its thread may allocate again.
  EXPECT_TRUE(loop.Call([] { FailAllocationsOnThisThread(false); }).ok());
  EXPECT_TRUE(loop.Call([] {}).ok());
  loop.Stop();
}

}  // namespace
}  // namespace kvtier::testing
