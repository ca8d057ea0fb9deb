#include "gpu/cuda/pinned_pool.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace kvtier::cuda {

PinnedPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      buffer_(std::move(other.buffer_)),
      device_(std::exchange(other.device_, nullptr)) {}

PinnedPool::Lease::~Lease() {
  if (pool_ != nullptr && buffer_.data() != nullptr) pool_->Return(std::move(buffer_));
}

Result<PinnedPool::Lease> PinnedPool::Acquire(size_t bytes) {
  PinnedBuffer buffer;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].size() >= bytes) {
        buffer = std::move(free_[i]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
  }
  if (buffer.data() == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(
        buffer, PinnedBuffer::Allocate(std::bit_ceil(std::max<size_t>(bytes, 64 << 10))));
  }
  void* device = MappedDevicePointer(buffer.data());
  if (device == nullptr) {
    return Status::Internal("pinned pool: cudaHostAlloc memory has no device mapping");
  }
  return Lease(this, std::move(buffer), device);
}

void PinnedPool::Return(PinnedBuffer buffer) {
  std::lock_guard lock(mu_);
  if (free_.size() < kMaxFree) free_.push_back(std::move(buffer));
}

}  // namespace kvtier::cuda
