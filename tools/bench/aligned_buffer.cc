#include "tools/bench/aligned_buffer.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>

namespace kvtier::bench {
namespace {

constexpr uint64_t kAlign = 4096;

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_bytes <= 0) return UINT64_MAX;  // unknown: let the allocator decide
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes);
}

}  // namespace

Result<AlignedBuffer> AlignedBuffer::Allocate(uint64_t bytes) {
  const auto refuse = [bytes](const std::string& why) {
    return Status::ResourceExhausted("cannot allocate a benchmark buffer of " +
                                     std::to_string(bytes) + " bytes: " + why);
  };
  if (bytes == 0) return refuse("size is 0");
  // Checked before rounding up, which would wrap near UINT64_MAX. A buffer
  // larger than RAM is refused here rather than left to the allocator (some
  // abort instead of returning null).
  const uint64_t ram = PhysicalMemoryBytes();
  if (bytes > ram) return refuse("larger than physical memory (" + std::to_string(ram) + " bytes)");
  void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr) return refuse("out of memory");
  return AlignedBuffer(bytes, static_cast<std::byte*>(p));
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(p_);
    bytes_ = std::exchange(other.bytes_, 0);
    p_ = std::exchange(other.p_, nullptr);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(p_); }

}  // namespace kvtier::bench
