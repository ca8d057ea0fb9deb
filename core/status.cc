#include "kvtier/status.h"

#include <cerrno>
#include <cstring>

namespace kvtier {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kResourceExhausted:
      return "resource_exhausted";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kBusy:
      return "busy";
    case StatusCode::kIOError:
      return "io_error";
    case StatusCode::kCorruption:
      return "corruption";
    case StatusCode::kNotSupported:
      return "not_supported";
    case StatusCode::kCancelled:
      return "cancelled";
    case StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

namespace {

// The message on the heap, or null when it is empty or memory is short: a
// Status keeps its code whatever the allocator says.
std::unique_ptr<std::string> CopyMessage(std::string_view m) noexcept {
  if (m.empty()) return nullptr;
  try {
    return std::make_unique<std::string>(m);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

Status::Status(StatusCode code, std::string_view message) noexcept
    : code_(code), message_(code == StatusCode::kOk ? nullptr : CopyMessage(message)) {}

Status::Status(const Status& other) noexcept
    : code_(other.code_), message_(other.message_ ? CopyMessage(*other.message_) : nullptr) {}

Status& Status::operator=(const Status& other) noexcept {
  if (this != &other) {
    code_ = other.code_;
    message_ = other.message_ ? CopyMessage(*other.message_) : nullptr;
  }
  return *this;
}

Status& Status::operator=(Status&& other) noexcept {
  if (this != &other) {
    code_ = std::exchange(other.code_, StatusCode::kOk);
    message_ = std::move(other.message_);
  }
  return *this;
}

std::string_view Status::message() const {
  return message_ ? std::string_view(*message_) : std::string_view();
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message();
  return out;
}

Status Status::WithContext(std::string_view context) const noexcept {
  if (ok()) return {};
  try {
    std::string m(context);
    m += ": ";
    m += message();
    return {code_, m};
  } catch (...) {
    return *this;  // memory is short: the status without its context
  }
}

Status FromErrno(int err, std::string_view operation) {
  std::string m(operation);
  m += ": ";
  m += std::strerror(err);
  switch (err) {
    case 0:
      return Status::Internal(m + " (errno 0)");
    case ENOENT:
      return Status::NotFound(m);
    case EINVAL:
      return Status::InvalidArgument(m);
    case ENOMEM:
    case ENOSPC:
    case EDQUOT:
      return Status::ResourceExhausted(m);
    case EAGAIN:
      return Status::Busy(m);
    case ETIMEDOUT:
      return Status::DeadlineExceeded(m);
    case ECANCELED:
      return Status::Cancelled(m);
    case EOPNOTSUPP:
      return Status::NotSupported(m);
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH:
      return Status::Unavailable(m);
    default:
      return Status::IOError(m);
  }
}

}  // namespace kvtier
