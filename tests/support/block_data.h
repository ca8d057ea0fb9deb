// Deterministic block contents for tests: the bytes of a block are a function
// of its key (and an optional version), so any reader can check what it got.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/block_key.h"

namespace kvtier::testing {

inline void FillBlock(const BlockKey& key, uint64_t version, std::span<std::byte> out) {
  uint64_t x = key.hi ^ (key.lo * 0x9E3779B97F4A7C15ULL) ^ (version << 17);
  for (size_t i = 0; i < out.size(); ++i) {
    if (i % 8 == 0) {  // splitmix64 step
      x += 0x9E3779B97F4A7C15ULL;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      x = z ^ (z >> 31);
    }
    out[i] = static_cast<std::byte>(x >> (8 * (i % 8)));
  }
}

inline std::vector<std::byte> BlockBytes(const BlockKey& key, size_t n, uint64_t version = 0) {
  std::vector<std::byte> v(n);
  FillBlock(key, version, v);
  return v;
}

inline BlockKey TestKey(uint64_t i) { return BlockKey{0xABCD0000ULL + i, i * 7919 + 1}; }

}  // namespace kvtier::testing
