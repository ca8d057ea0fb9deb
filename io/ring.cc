#include "io/ring.h"

#include <cstring>
#include <utility>

namespace kvtier::internal {

void Ring::Deleter::operator()(io_uring* r) const {
  io_uring_queue_exit(r);
  delete r;
}

Result<Ring> Ring::Create(uint32_t entries) {
  auto raw = std::make_unique<io_uring>();
  std::memset(raw.get(), 0, sizeof(io_uring));
  int rc = io_uring_queue_init(entries, raw.get(), 0);
  if (rc < 0) return FromErrno(-rc, "io_uring_queue_init");
  Ring ring;
  ring.ring_.reset(raw.release());
  ring.entries_ = entries;
  return ring;
}

Ring& Ring::operator=(Ring&& other) noexcept {
  ring_ = std::move(other.ring_);
  entries_ = std::exchange(other.entries_, 0);
  return *this;
}

Ring::~Ring() = default;

Status Ring::RegisterBuffers(const struct iovec* iov, unsigned count) {
  int rc = io_uring_register_buffers(ring_.get(), iov, count);
  if (rc < 0) return FromErrno(-rc, "io_uring_register_buffers");
  return Status::Ok();
}

Status Ring::RegisterFile(int fd) {
  int rc = io_uring_register_files(ring_.get(), &fd, 1);
  if (rc < 0) return FromErrno(-rc, "io_uring_register_files");
  return Status::Ok();
}

}  // namespace kvtier::internal
