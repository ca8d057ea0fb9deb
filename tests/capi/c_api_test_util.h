// Helpers of the C API tests: a config for the host stand-in, and owners for
// the C handles so that a failed assertion frees them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/c_api.h"

namespace kvtier::testing {

// The tiny model (8 KiB blocks of 16 tokens, 4 layers), a 16-page engine
// pool and one host tier of `host_capacity`; `extra` is appended at the top
// level (e.g. "runtime:\n  gpu_watermark: 0.1\n").
inline std::string CapiConfig(const std::string& host_capacity = "1MiB",
                              const std::string& extra = "") {
  return "model:\n  preset: tiny\n  block_tokens: 16\n"
         "engine:\n  pool_blocks: 16\n"
         "tiers:\n  - name: host\n    type: host\n    capacity: " +
         host_capacity + "\n    hugepages: false\n    mlock: false\n" + extra;
}

struct RuntimeCloser {
  void operator()(kvtier_runtime* rt) const { kvtier_close(rt); }
};
using RuntimePtr = std::unique_ptr<kvtier_runtime, RuntimeCloser>;

struct CompletionFreer {
  void operator()(kvtier_completion* c) const { kvtier_completion_free(c); }
};
using CompletionPtr = std::unique_ptr<kvtier_completion, CompletionFreer>;

// Opens a runtime from `yaml`; null (with a test failure) when it fails.
inline RuntimePtr OpenText(const std::string& yaml) {
  kvtier_runtime* rt = nullptr;
  const int code = kvtier_open(nullptr, yaml.c_str(), nullptr, 0, nullptr, nullptr, nullptr, &rt);
  EXPECT_EQ(code, KVTIER_OK) << kvtier_last_error();
  return RuntimePtr(rt);
}

// Keys of `blocks` full blocks of distinct tokens, starting from `seed`.
inline std::vector<kvtier_key> ChainOf(kvtier_runtime* rt, size_t blocks, int32_t seed) {
  std::vector<int32_t> tokens(blocks * kvtier_block_tokens(rt));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = seed + static_cast<int32_t>(i);
  std::vector<kvtier_key> keys(blocks);
  size_t count = 0;
  EXPECT_EQ(
      kvtier_key_chain(rt, nullptr, tokens.data(), tokens.size(), keys.data(), keys.size(), &count),
      KVTIER_OK)
      << kvtier_last_error();
  EXPECT_EQ(count, blocks);
  return keys;
}

// Bytes of one block, distinct for each seed.
inline std::vector<unsigned char> Pattern(uint64_t bytes, uint32_t seed) {
  std::vector<unsigned char> b(bytes);
  for (uint64_t i = 0; i < bytes; ++i) b[i] = static_cast<unsigned char>(i * 131 + seed * 7919);
  return b;
}

// Writes Pattern(seed = engine block + 1) into each engine block, then saves
// them as `keys`; returns the completion's code.
inline int SaveBlocks(kvtier_runtime* rt, const std::vector<kvtier_key>& keys,
                      const std::vector<uint32_t>& blocks, const kvtier_key* parent = nullptr) {
  for (uint32_t b : blocks) {
    const std::vector<unsigned char> p = Pattern(kvtier_block_bytes(rt), b + 1);
    EXPECT_EQ(kvtier_host_block_write(rt, b, p.data(), p.size()), KVTIER_OK) << kvtier_last_error();
  }
  kvtier_completion* c = nullptr;
  const int code = kvtier_save(rt, parent, keys.data(), blocks.data(), keys.size(), nullptr, &c);
  EXPECT_EQ(code, KVTIER_OK) << kvtier_last_error();
  CompletionPtr owned(c);
  return kvtier_completion_wait(c, -1);
}

}  // namespace kvtier::testing
