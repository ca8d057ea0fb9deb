#include "tools/bench/block_content.h"

#include <bit>
#include <cstdint>
#include <cstring>

namespace kvtier::bench {

static_assert(std::endian::native == std::endian::little, "block content is little-endian");

void FillBlockContent(const BlockKey& key, std::span<std::byte> out) {
  uint64_t state = key.hi ^ key.lo;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  std::byte* p = out.data();
  size_t left = out.size();
  for (; left >= 8; left -= 8, p += 8) {
    uint64_t v = next();
    std::memcpy(p, &v, 8);
  }
  if (left > 0) {
    uint64_t v = next();
    for (size_t i = 0; i < left; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
  }
}

}  // namespace kvtier::bench
