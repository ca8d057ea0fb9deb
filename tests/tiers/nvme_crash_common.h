// What the NVMe crash test and its writer process agree on.
#pragma once

#include "tests/tiers/nvme_test_util.h"

namespace kvtier::testing {

inline constexpr uint64_t kCrashBlockBytes = 16 * 1024;
inline constexpr uint64_t kCrashCapacityBlocks = 256;
inline constexpr uint64_t kCrashBatch = 4;
inline constexpr uint64_t kCrashFlushEvery = 16;
inline constexpr NamespaceId kCrashNs{0xC0FFEE};

inline BlockKey CrashKey(uint64_t round, uint64_t i) {
  return BlockKey{0xC4A5000000000000ULL | (round << 20) | i, round * 1000003 + i};
}

inline TierOptions CrashOptions(const std::string& dir) {
  return NvmeOptions(dir, kCrashCapacityBlocks, kCrashBlockBytes);
}

}  // namespace kvtier::testing
