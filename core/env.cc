#include "kvtier/env.h"

#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace kvtier {
namespace {

class SteadyClock final : public Clock {
 public:
  uint64_t NowNanos() const override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
};

class StderrSink final : public LogSink {
 public:
  explicit StderrSink(LogLevel min) : min_(min) {}
  void Log(LogLevel level, std::string_view message) override {
    if (level < min_) return;
    static constexpr std::string_view kNames[] = {"debug", "info", "warning", "error"};
    const std::string_view name = kNames[static_cast<int>(level)];
    // One writev per line keeps concurrent lines whole, and allocates
    // nothing: a line about memory running out still gets out.
    iovec parts[] = {{const_cast<char*>("kvtier "), 7},
                     {const_cast<char*>(name.data()), name.size()},
                     {const_cast<char*>(": "), 2},
                     {const_cast<char*>(message.data()), message.size()},
                     {const_cast<char*>("\n"), 1}};
    (void)writev(STDERR_FILENO, parts, 5);
  }

 private:
  LogLevel min_;
};

}  // namespace

std::shared_ptr<Clock> SystemClock() { return std::make_shared<SteadyClock>(); }

std::shared_ptr<LogSink> StderrLogSink(LogLevel min_level) {
  return std::make_shared<StderrSink>(min_level);
}

}  // namespace kvtier
