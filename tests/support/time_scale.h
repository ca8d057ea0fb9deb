// Wall-clock bounds in tests check that a call ends by its deadline rather
// than by some later event. Sanitizer builds run several times slower, on a
// shared 2-core CI host, so scripts/test.sh sets KVTIER_TEST_TIME_SCALE for
// them and such bounds are multiplied by it (1 when unset; at most 20).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace kvtier::testing {

inline int TimeScale() {
  static const int scale = [] {
    const char* e = std::getenv("KVTIER_TEST_TIME_SCALE");
    return std::clamp(e != nullptr ? std::atoi(e) : 1, 1, 20);
  }();
  return scale;
}

// `bound`, stretched for a slow (sanitizer) build.
template <typename Rep, typename Period>
std::chrono::duration<Rep, Period> Scaled(std::chrono::duration<Rep, Period> bound) {
  return bound * TimeScale();
}

}  // namespace kvtier::testing
