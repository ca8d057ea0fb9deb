// Page-aligned benchmark buffers (engine pools and hub slots are page-aligned,
// so both sides of a comparison copy between page-aligned memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/status.h"

namespace kvtier::bench {

// `bytes` of 4 KiB-aligned heap memory; move-only, freed with itself.
class AlignedBuffer {
 public:
  // ResourceExhausted, naming the size, when `bytes` is 0, larger than this
  // machine's physical memory, or cannot be allocated.
  static Result<AlignedBuffer> Allocate(uint64_t bytes);

  AlignedBuffer(AlignedBuffer&& other) noexcept : bytes_(other.bytes_), p_(other.p_) {
    other.bytes_ = 0;
    other.p_ = nullptr;
  }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  std::byte* data() const { return p_; }
  size_t size() const { return bytes_; }
  std::span<std::byte> span() const { return {p_, bytes_}; }
  std::span<std::byte> subspan(size_t offset, size_t length) const { return {p_ + offset, length}; }

 private:
  AlignedBuffer(uint64_t bytes, std::byte* p) : bytes_(bytes), p_(p) {}
  uint64_t bytes_;
  std::byte* p_;
};

}  // namespace kvtier::bench
