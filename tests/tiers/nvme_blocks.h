// Block helpers of the NVMe tier tests: whole batches written and read back
// byte for byte, in one namespace.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "kvtier/tier.h"
#include "tests/support/block_data.h"

namespace kvtier::testing {

inline constexpr NamespaceId kNvmeNs{0x77};

// Writes blocks [first, first+count) of `bytes` each, one batch.
inline void WriteBlocks(Tier& t, uint64_t first, uint64_t count, uint64_t bytes,
                        uint64_t version = 0) {
  std::vector<std::vector<std::byte>> data;
  std::vector<WriteOp> ops;
  for (uint64_t i = first; i < first + count; ++i)
    data.push_back(BlockBytes(TestKey(i), bytes, version));
  for (uint64_t i = 0; i < count; ++i) ops.push_back({TestKey(first + i), data[i]});
  Completion c = t.Write(kNvmeNs, ops);
  ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
}

// Reads block i and compares it byte for byte; returns the read's status.
inline Status ReadAndCheck(Tier& t, uint64_t i, uint64_t bytes, uint64_t version = 0) {
  std::vector<std::byte> out(bytes);
  ReadOp rd{TestKey(i), out};
  Completion c = t.Read(kNvmeNs, std::span(&rd, 1));
  (void)c.Wait();
  if (c.result(0).ok()) {
    EXPECT_EQ(c.bytes(0), bytes);
    EXPECT_TRUE(out == BlockBytes(TestKey(i), bytes, version)) << "block " << i << " differs";
  }
  return c.result(0);
}

}  // namespace kvtier::testing
