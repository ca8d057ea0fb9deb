// Layout descriptors of the engine's paged KV cache ("GPU" side) and the
// canonical host block format.
//
// Engine-side layouts (element = one dtype value):
//   kVllmNhd   per layer: (2, num_blocks, block_tokens, num_kv_heads, head_size)
//   kVllmHnd   per layer: (2, num_blocks, num_kv_heads, block_tokens, head_size)
//   kCrossLayer one tensor: (num_blocks, num_layers, 2, block_tokens, num_kv_heads, head_size)
// Host block (every tier below the GPU): one contiguous cross-layer unit
//   (num_layers, 2, block_tokens, num_kv_heads, head_size)
// so a block is one I/O and is portable between engine layouts of the same
// model. The offset functions here are shared by every copy engine (host
// stand-in and CUDA) so both move exactly the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/export.h"
#include "kvtier/status.h"

namespace kvtier {

enum class KvLayoutKind : uint8_t { kVllmNhd, kVllmHnd, kCrossLayer };

KVTIER_EXPORT std::string_view KvLayoutKindName(KvLayoutKind kind);
KVTIER_EXPORT Result<KvLayoutKind> ParseKvLayoutKind(std::string_view name);

struct KVTIER_EXPORT KvLayout {
  KvLayoutKind kind = KvLayoutKind::kVllmNhd;
  uint32_t num_layers = 1;
  uint32_t num_blocks = 1;    // pages in the engine's pool
  uint32_t block_tokens = 16;
  uint32_t num_kv_heads = 1;
  uint32_t head_size = 64;
  uint32_t elem_bytes = 2;    // 2 for fp16/bf16, 1 for fp8, 4 for fp32

  // Bytes of one block in the canonical host format.
  uint64_t BlockBytes() const {
    return uint64_t{num_layers} * 2 * block_tokens * num_kv_heads * head_size * elem_bytes;
  }
  // Bytes of one (layer, K|V) page of one block.
  uint64_t PageBytes() const {
    return uint64_t{block_tokens} * num_kv_heads * head_size * elem_bytes;
  }
  // "nhd:L4:H2:D64:T16:E2": folded into the namespace id.
  std::string Signature() const;
  // Rejects zero dimensions, unknown element sizes and sizes that overflow.
  Status Validate() const;
};

// Byte offset of element (layer, kv, token, head, 0) of `block` in the engine
// tensor holding that layer (per-layer layouts) or in the single cross-layer
// tensor. kv is 0 for K, 1 for V.
KVTIER_EXPORT uint64_t EngineOffset(const KvLayout& layout, uint32_t block, uint32_t layer,
                                    uint32_t kv, uint32_t token, uint32_t head);

// Byte offset of the same element inside a canonical host block.
KVTIER_EXPORT uint64_t HostOffset(const KvLayout& layout, uint32_t layer, uint32_t kv,
                                  uint32_t token, uint32_t head);

// Bytes of one engine tensor: one layer for per-layer layouts, the whole
// cache for kCrossLayer.
KVTIER_EXPORT uint64_t EngineTensorBytes(const KvLayout& layout);

// Number of engine tensors: num_layers for per-layer layouts, 1 otherwise.
KVTIER_EXPORT uint32_t EngineTensorCount(const KvLayout& layout);

}  // namespace kvtier
