#include "kvtier/status.h"

#include <cerrno>
#include <cstring>

namespace kvtier {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kBusy: return "busy";
    case StatusCode::kIOError: return "io_error";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kNotSupported: return "not_supported";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string_view message) {
  // An OK code never carries state: ok() must stay a null check.
  if (code != StatusCode::kOk) state_ = std::make_unique<State>(State{code, std::string(message)});
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  return *this;
}

std::string_view Status::message() const {
  return state_ ? std::string_view(state_->message) : std::string_view();
}

std::string Status::ToString() const {
  if (!state_) return "ok";
  std::string out(StatusCodeName(state_->code));
  out += ": ";
  out += state_->message;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (!state_) return {};
  std::string m(context);
  m += ": ";
  m += state_->message;
  return {state_->code, m};
}

Status FromErrno(int err, std::string_view operation) {
  std::string m(operation);
  m += ": ";
  m += std::strerror(err);
  switch (err) {
    case 0: return Status::Internal(m + " (errno 0)");
    case ENOENT: return Status::NotFound(m);
    case EINVAL: return Status::InvalidArgument(m);
    case ENOMEM:
    case ENOSPC:
    case EDQUOT: return Status::ResourceExhausted(m);
    case EAGAIN: return Status::Busy(m);
    case ETIMEDOUT: return Status::DeadlineExceeded(m);
    case ECANCELED: return Status::Cancelled(m);
    case EOPNOTSUPP: return Status::NotSupported(m);
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH: return Status::Unavailable(m);
    default: return Status::IOError(m);
  }
}

}  // namespace kvtier
