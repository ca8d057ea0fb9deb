// A LogSink for tests that keeps the lines at or above a level (and, when
// given, containing a substring), so a test can assert what was logged.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/env.h"

namespace kvtier::testing {

class RecordingLog final : public LogSink {
 public:
  explicit RecordingLog(LogLevel min_level, std::string contains = "")
      : min_level_(min_level), contains_(std::move(contains)) {}
  void Log(LogLevel level, std::string_view message) override {
    if (level < min_level_ || message.find(contains_) == std::string_view::npos) return;
    std::lock_guard<std::mutex> lock(mu_);
    lines_.emplace_back(message);
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  const LogLevel min_level_;
  const std::string contains_;
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

}  // namespace kvtier::testing
