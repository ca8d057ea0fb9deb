// For tests of calls that must not hang: runs the call on its own thread and
// reports whether it returned in time, so that a regression fails the test
// instead of stalling the suite until ctest's timeout.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

namespace kvtier::testing {

// Runs `fn` on its own thread; false when it has not returned within `limit`.
// The thread is then left behind, blocked, and must not be joined: `fn`
// should capture only what outlives the test binary's run or accept that a
// failed test leaves it dangling.
inline bool ReturnsWithin(std::function<void()> fn, std::chrono::milliseconds limit) {
  auto done = std::make_shared<std::promise<void>>();
  auto returned = done->get_future();
  std::thread([fn = std::move(fn), done] {
    fn();
    done->set_value();
  }).detach();
  return returned.wait_for(limit) == std::future_status::ready;
}

}  // namespace kvtier::testing
