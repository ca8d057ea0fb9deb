#include "gpu/cuda/pinned_pool.h"

#include <algorithm>
#include <bit>
#include <new>
#include <utility>

#include "gpu/cuda/cuda_util.h"

namespace kvtier::cuda {
namespace {

class MappedPinnedBuffer final : public PinnedPool::Buffer {
 public:
  MappedPinnedBuffer(PinnedBuffer buffer, void* device)
      : buffer_(std::move(buffer)), device_(device) {}
  void* host() const override { return buffer_.data(); }
  void* device() const override { return device_; }
  size_t size() const override { return buffer_.size(); }

 private:
  PinnedBuffer buffer_;
  void* device_;
};

}  // namespace

PinnedPool::Allocator PinnedPool::MappedPinnedAllocator() {
  return [](size_t bytes) -> Result<std::unique_ptr<Buffer>> {
    KVTIER_ASSIGN_OR_RETURN(PinnedBuffer buffer, PinnedBuffer::Allocate(bytes));
    void* device = MappedDevicePointer(buffer.data());
    if (device == nullptr) {
      return Status::Internal("pinned pool: cudaHostAlloc memory has no device mapping");
    }
    return std::unique_ptr<Buffer>(new MappedPinnedBuffer(std::move(buffer), device));
  };
}

PinnedPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), buffer_(std::move(other.buffer_)) {}

PinnedPool::Lease::~Lease() {
  if (pool_ != nullptr && buffer_ != nullptr) pool_->Return(std::move(buffer_));
}

PinnedPool::PinnedPool(Allocator allocate, size_t max_free_bytes)
    : allocate_(std::move(allocate)), max_free_bytes_(max_free_bytes) {}

PinnedPool::~PinnedPool() = default;

Result<PinnedPool::Lease> PinnedPool::Acquire(size_t bytes) {
  std::unique_ptr<Buffer> buffer;
  std::vector<std::unique_ptr<Buffer>> retired;
  {
    std::lock_guard lock(mu_);
    retired.swap(retired_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if ((*it)->size() >= bytes && (best == free_.end() || (*it)->size() < (*best)->size())) {
        best = it;
      }
    }
    if (best != free_.end()) {
      buffer = std::move(*best);
      free_.erase(best);
      free_bytes_ -= buffer->size();
    }
  }
  retired.clear();  // freed outside the lock
  if (buffer == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(buffer, allocate_(std::bit_ceil(std::max<size_t>(bytes, 64 << 10))));
  }
  return Lease(this, std::move(buffer));
}

// Runs where a lease ends, which may be the completion thread: nothing is
// freed here. What does not fit under the caps is set aside for Acquire: a
// buffer larger than the byte cap on its own, else the smallest idle ones
// (the large ones cost the most to allocate again, and the cap bounds them).
// Out of memory for the lists, the buffer is freed here after all.
void PinnedPool::Return(std::unique_ptr<Buffer> buffer) noexcept {
  std::lock_guard lock(mu_);
  try {
    if (buffer->size() > max_free_bytes_) {
      retired_.push_back(std::move(buffer));
      return;
    }
    free_.push_back(std::move(buffer));
  } catch (const std::bad_alloc&) {
    return;
  }
  free_bytes_ += free_.back()->size();
  while (free_bytes_ > max_free_bytes_ || free_.size() > kMaxFree) {
    auto smallest = std::min_element(free_.begin(), free_.end(), [](const auto& a, const auto& b) {
      return a->size() < b->size();
    });
    free_bytes_ -= (*smallest)->size();
    try {
      retired_.push_back(std::move(*smallest));
    } catch (const std::bad_alloc&) {
      // Not moved (strong guarantee): erased below, freed here after all.
    }
    free_.erase(smallest);
  }
}

}  // namespace kvtier::cuda
