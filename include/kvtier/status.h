// kvtier::Status and kvtier::Result<T>: the one error type of the library.
//
// A Status is a code and a message, the message allocated only when there is
// one. Building or copying a Status never throws: when memory is short the
// copy keeps its code and loses its message, so a destructor or a completion
// can always report what happened. Result<T> holds either a value or a non-OK Status, never an OK
// status without a value. No exception crosses the public API: every fallible
// call returns one of these.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kvtier/export.h"

namespace kvtier {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound,           // the block is not in this tier (a miss)
  kInvalidArgument,    // the caller passed something malformed
  kResourceExhausted,  // the tier is full
  kUnavailable,        // retryable: a server or device is down, or shut down
  kBusy,               // a bounded queue is full; try again later
  kIOError,
  kCorruption,         // header or checksum mismatch: never handed over as data
  kNotSupported,       // the backend is compiled out or the hardware is absent
  kCancelled,
  kDeadlineExceeded,
  kInternal,
};

// Stable lower-case name of a code ("not_found"), used in logs and metrics.
KVTIER_EXPORT std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] KVTIER_EXPORT Status {
 public:
  Status() noexcept = default;
  Status(StatusCode code, std::string_view message) noexcept;
  Status(const Status& other) noexcept;
  Status& operator=(const Status& other) noexcept;
  // A moved-from Status is OK.
  Status(Status&& other) noexcept
      : code_(std::exchange(other.code_, StatusCode::kOk)), message_(std::move(other.message_)) {}
  Status& operator=(Status&& other) noexcept;
  ~Status() = default;

  static Status Ok() { return Status(); }
  static Status NotFound(std::string_view m) { return {StatusCode::kNotFound, m}; }
  static Status InvalidArgument(std::string_view m) { return {StatusCode::kInvalidArgument, m}; }
  static Status ResourceExhausted(std::string_view m) {
    return {StatusCode::kResourceExhausted, m};
  }
  static Status Unavailable(std::string_view m) { return {StatusCode::kUnavailable, m}; }
  static Status Busy(std::string_view m) { return {StatusCode::kBusy, m}; }
  static Status IOError(std::string_view m) { return {StatusCode::kIOError, m}; }
  static Status Corruption(std::string_view m) { return {StatusCode::kCorruption, m}; }
  static Status NotSupported(std::string_view m) { return {StatusCode::kNotSupported, m}; }
  static Status Cancelled(std::string_view m) { return {StatusCode::kCancelled, m}; }
  static Status DeadlineExceeded(std::string_view m) {
    return {StatusCode::kDeadlineExceeded, m};
  }
  static Status Internal(std::string_view m) { return {StatusCode::kInternal, m}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // The message without the code; empty when OK, or when memory was short.
  std::string_view message() const;
  // "not_found: <message>", or "ok".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  // Never throws: without memory for the longer message, a plain copy.
  Status WithContext(std::string_view context) const noexcept;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::unique_ptr<std::string> message_;  // null when OK or empty
};

// Converts an errno value into a Status naming the operation, e.g.
// FromErrno(ENOSPC, "host arena mmap") -> ResourceExhausted.
KVTIER_EXPORT Status FromErrno(int err, std::string_view operation);

// The status `describe()` builds, or Status(code, fallback) when building it
// throws: a detailed message needs memory, and a thread or handler that
// reports a failure must report it whatever the allocator says.
template <typename Describe>
Status DescribedStatus(StatusCode code, std::string_view fallback,
                       const Describe& describe) noexcept {
  try {
    return describe();
  } catch (...) {
    return Status(code, fallback);
  }
}

template <typename T>
class [[nodiscard]] Result {
 public:
  // REQUIRES: !status.ok(). An OK status without a value becomes Internal.
  Result(Status status)  // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? Status::Internal("Result built from OK status without a value")
                            : std::move(status)) {}
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kvtier

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define KVTIER_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::kvtier::Status _kvtier_st = (expr);     \
    if (!_kvtier_st.ok()) return _kvtier_st;  \
  } while (0)

#define KVTIER_CONCAT_INNER(a, b) a##b
#define KVTIER_CONCAT(a, b) KVTIER_CONCAT_INNER(a, b)
#define KVTIER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
// Declares or assigns `lhs` from a Result, returning its Status on error.
#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL(KVTIER_CONCAT(_kvtier_r_, __LINE__), lhs, expr)
