// For tests of calls that must not hang: runs the call on its own thread and
// reports whether it returned in time, so that a regression fails the test
// instead of stalling the suite until ctest's timeout.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <thread>

namespace kvtier::testing {

// Runs `fn` on its own thread; true once it returns within `limit`. If it
// has not, the test has failed and the process ends at once with a message:
// `fn` usually captures the test's locals by reference, and going on (or
// unwinding the test) while the stuck call may still write to them would
// turn a clean failure into a use after scope. ctest runs each test in its
// own process, so only this test is lost. (The stuck thread is never joined:
// _Exit runs no destructors, so its std::thread does not terminate us first.)
inline bool ReturnsWithin(std::function<void()> fn, std::chrono::milliseconds limit,
                          const char* what = "a call that must return") {
  auto done = std::make_shared<std::promise<void>>();
  auto returned = done->get_future();
  std::thread runner([fn = std::move(fn), done] {
    fn();
    done->set_value();
  });
  if (returned.wait_for(limit) == std::future_status::ready) {
    // Joined, not left to end on its own: the thread's exit frees what its
    // libraries keep per thread (OpenSSL's random generators), which a
    // process ending first would report as leaked.
    runner.join();
    return true;
  }
  std::fprintf(stderr, "FAILED: %s did not return within %lld ms; ending the test\n", what,
               static_cast<long long>(limit.count()));
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace kvtier::testing
