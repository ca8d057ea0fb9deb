#include "kvtier/env.h"

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
    static constexpr const char* kNames[] = {"debug", "info", "warning", "error"};
    std::string line = "kvtier ";
    line += kNames[static_cast<int>(level)];
    line += ": ";
    line += message;
    line += '\n';
    // One fwrite per line keeps concurrent lines whole.
    std::fwrite(line.data(), 1, line.size(), stderr);
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
