// Test helpers for layouts and copy engines: a small odd-sized geometry,
// reference positions computed from explicit stride tables (written
// independently of kv_layout.cc), and byte patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/copy_engine.h"
#include "kvtier/kv_layout.h"

namespace kvtier::testing {

// layers=3, blocks=5, tokens=4, heads=2, head_size=3, elem_bytes=2; for
// kMla heads=1, head_size (latent) = 12, so every kind's block is 288 bytes.
KvLayout SmallLayout(KvLayoutKind kind);

// Where element (block, layer, kv, token, head, 0) lives in the engine.
struct EnginePos {
  uint32_t tensor = 0;
  uint64_t offset = 0;
};
EnginePos RefEngine(const KvLayout& l, uint32_t block, uint32_t layer, uint32_t kv, uint32_t token,
                    uint32_t head);
uint64_t RefHost(const KvLayout& l, uint32_t layer, uint32_t kv, uint32_t token, uint32_t head);

// The engine block a byte of tensor `tensor` at `offset` belongs to.
uint32_t RefBlockOfByte(const KvLayout& l, uint64_t offset);

// Numbers every element of every tensor 1, 2, 3, ... (little-endian,
// truncated to elem_bytes), so each element of a small pool is unique.
void FillPattern(HostCopyEngine& engine);

// Copies of every engine tensor.
std::vector<std::vector<std::byte>> Snapshot(HostCopyEngine& engine);

// BlockBytes() pseudo-random bytes, none of them zero.
std::vector<std::byte> RandomBlock(const KvLayout& l, uint32_t seed);

// Calls fn(layer, kv, token, head) for every row of a block.
template <typename F>
void ForEachRow(const KvLayout& l, F&& fn) {
  for (uint32_t layer = 0; layer < l.num_layers; ++layer)
    for (uint32_t kv = 0; kv < l.Planes(); ++kv)
      for (uint32_t token = 0; token < l.block_tokens; ++token)
        for (uint32_t head = 0; head < l.num_kv_heads; ++head) fn(layer, kv, token, head);
}

inline uint64_t RowBytes(const KvLayout& l) { return uint64_t{l.head_size} * l.elem_bytes; }

// The per-copy results a CopyDone callback got.
struct CopyResults {
  std::vector<Status> each;
  bool ok() const;
  // "ok | invalid_argument: ..." in copy order.
  std::string ToString() const;
};

// Runs Gather or Scatter and waits up to 20 s for `done` (which may run on
// another thread). On timeout every result is DeadlineExceeded.
CopyResults GatherAndWait(CopyEngine& engine, std::span<const BlockCopy> copies);
CopyResults ScatterAndWait(CopyEngine& engine, std::span<const BlockCopy> copies,
                           LayerDone on_layer);

}  // namespace kvtier::testing
