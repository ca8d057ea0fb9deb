// Injected process services: the clock and the log sink. The library owns no
// process globals; a Runtime gets these through its options, and tests replace
// them (a manual clock steps the mover without sleeping).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "kvtier/export.h"

namespace kvtier {

class KVTIER_EXPORT Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds from an arbitrary origin. Thread-safe.
  virtual uint64_t NowNanos() const = 0;
};

// std::chrono::steady_clock.
KVTIER_EXPORT std::shared_ptr<Clock> SystemClock();

// A clock that only moves when told to; thread-safe.
class KVTIER_EXPORT ManualClock : public Clock {
 public:
  explicit ManualClock(uint64_t start_nanos = 1) : now_(start_nanos) {}
  uint64_t NowNanos() const override { return now_.load(std::memory_order_acquire); }
  void Advance(uint64_t nanos) { now_.fetch_add(nanos, std::memory_order_acq_rel); }

 private:
  std::atomic<uint64_t> now_;
};

enum class LogLevel : uint8_t { kDebug, kInfo, kWarning, kError };

class KVTIER_EXPORT LogSink {
 public:
  virtual ~LogSink() = default;
  // Called from any thread; implementations must be thread-safe.
  virtual void Log(LogLevel level, std::string_view message) = 0;
};

// Writes "kvtier <level>: message" lines to stderr at or above `min_level`.
KVTIER_EXPORT std::shared_ptr<LogSink> StderrLogSink(LogLevel min_level = LogLevel::kInfo);

}  // namespace kvtier
