// Little-endian encoding helpers shared by key hashing and block headers, so
// that hashes and headers are identical on every host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace kvtier::internal {

class ByteWriter {
 public:
  void U8(uint8_t v) { buf_.push_back(static_cast<std::byte>(v)); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(std::span<const std::byte> b) {
    U64(b.size());
    buf_.insert(buf_.end(), b.begin(), b.end());
  }
  void Str(std::string_view s) { Bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  std::span<const std::byte> data() const { return buf_; }
  void Reserve(size_t n) { buf_.reserve(n); }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  std::vector<std::byte> buf_;
};

inline void StoreLe(std::byte* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

inline uint64_t LoadLe(const std::byte* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace kvtier::internal
