#include "tiers/remote/rdma_staging.h"

#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace kvtier::internal::memd {

// What leases and the pool share: the idle buffers. A lease may end on a
// completion thread, hence the mutex; `closed` lets leases that outlive the
// pool release their buffers instead of parking them.
struct RdmaStagingPool::Shared {
  struct Idle {
    std::unique_ptr<std::byte[]> buffer;
    std::unique_ptr<RdmaMemory> mr;  // registers `buffer`; dropped first
  };
  std::mutex mu;
  std::vector<Idle> idle;  // guarded by mu; the last one is reused first
  size_t pooled = 0;       // guarded by mu; lent or idle
  bool closed = false;     // guarded by mu
};

Status RdmaStagingOptions::Validate() const {
  if (buffer_bytes == 0 || max_buffers == 0) {
    return Status::InvalidArgument("RDMA staging needs buffer_bytes and max_buffers above 0");
  }
  return Status::Ok();
}

RdmaStagingPool::Lease::Lease(Lease&& other) noexcept { *this = std::move(other); }

RdmaStagingPool::Lease& RdmaStagingPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Reset();
    shared_ = std::move(other.shared_);
    buffer_ = std::move(other.buffer_);
    mr_ = std::move(other.mr_);
    bytes_ = std::exchange(other.bytes_, {});
    lkey_ = std::exchange(other.lkey_, 0);
    pooled_ = std::exchange(other.pooled_, false);
  }
  return *this;
}

void RdmaStagingPool::Lease::Reset() {
  if (pooled_ && shared_) {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (!shared_->closed) {
      shared_->idle.push_back({std::move(buffer_), std::move(mr_)});
    }
  }
  // A one-off buffer, or one whose pool is gone: deregister, then free.
  mr_.reset();
  buffer_.reset();
  shared_.reset();
  bytes_ = {};
  lkey_ = 0;
  pooled_ = false;
}

RdmaStagingPool::RdmaStagingPool(RdmaDevice& device, const RdmaStagingOptions& options)
    : device_(device), options_(options), shared_(std::make_shared<Shared>()) {
  // Leases park their buffers without allocating (Reset runs in noexcept
  // moves and destructors): at most max_buffers are ever idle.
  shared_->idle.reserve(options_.max_buffers);
}

RdmaStagingPool::~RdmaStagingPool() {
  std::vector<Shared::Idle> idle;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->closed = true;
    idle.swap(shared_->idle);
  }
  // Deregistered outside the lock: a device may take locks of its own.
  for (Shared::Idle& i : idle) i.mr.reset();
}

Result<RdmaStagingPool::Lease> RdmaStagingPool::Acquire(size_t bytes) {
  Lease lease;
  if (bytes == 0) return lease;
  bool grow = false;
  if (bytes <= options_.buffer_bytes) {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (!shared_->idle.empty()) {
      lease.buffer_ = std::move(shared_->idle.back().buffer);
      lease.mr_ = std::move(shared_->idle.back().mr);
      shared_->idle.pop_back();
      lease.pooled_ = true;
    } else if (shared_->pooled < options_.max_buffers) {
      // Counted now so that a failed registration is uncounted below.
      ++shared_->pooled;
      grow = true;
    }
  }
  if (!lease.pooled_) {
    const size_t n = grow ? options_.buffer_bytes : bytes;
    auto fail = [&](Status why) {  // a buffer counted above never came to be
      if (grow) {
        std::lock_guard<std::mutex> lock(shared_->mu);
        --shared_->pooled;
      }
      return why;
    };
    try {
      lease.buffer_ = std::make_unique_for_overwrite<std::byte[]>(n);
    } catch (const std::bad_alloc&) {
      // A fixed message: building one would need the memory that ran out.
      return fail(Status::ResourceExhausted("RDMA staging: out of memory for a staging buffer"));
    }
    auto mr = device_.Register({lease.buffer_.get(), n});
    if (!mr.ok()) return fail(mr.status().WithContext("registering RDMA staging memory"));
    lease.mr_ = std::move(mr).value();
    lease.pooled_ = grow;
  }
  lease.shared_ = shared_;
  lease.bytes_ = {lease.buffer_.get(), bytes};
  lease.lkey_ = lease.mr_->lkey();
  return lease;
}

size_t RdmaStagingPool::pooled() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->pooled;
}

size_t RdmaStagingPool::idle() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->idle.size();
}

}  // namespace kvtier::internal::memd
