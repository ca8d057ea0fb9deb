// Layout descriptors of the engine's paged KV cache ("GPU" side) and the
// canonical host block format.
//
// Engine-side layouts, physical (contiguous) shape, outermost dimension
// first; element = one dtype value, T = block_tokens, H = num_kv_heads,
// D = head_size, N = num_blocks, L = num_layers:
//   kVllmNhd    per layer: (2, N, T, H, D)   vLLM FlashAttention, NHD order
//   kVllmHnd    per layer: (2, N, H, T, D)   vLLM FlashAttention, HND order
//   kFlashInfer per layer: (N, 2, T, H, D)   FlashInfer paged cache
//   kPacked     per layer: (N, H, T, 2 * D)  K and V rows side by side
//   kCrossLayer one tensor: (N, L, 2, T, H, D)
//   kMla        per layer: (N, T, D)         MLA latent cache; D is
//               kv_lora_rank + rope_dim and H must be 1. MLA has no separate
//               K and V: it has one "plane" where the others have two.
// Host block (every tier below the GPU): one contiguous cross-layer unit
//   (L, planes, T, H, D)   planes = 2 (K then V), or 1 for kMla
// which for MLA is (L, T, D). A block is one I/O, and its bytes are the same
// whatever the engine layout of the same model and plane count; the layout
// kind is part of the namespace all the same, so engines share blocks only
// when their layouts match (docs/INTEGRATION.md). The offset functions here
// are shared by every copy engine (host stand-in and CUDA) so both move
// exactly the same bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/export.h"
#include "kvtier/status.h"

namespace kvtier {

// Values are stable (they may be stored); new kinds are appended.
enum class KvLayoutKind : uint8_t {
  kVllmNhd,
  kVllmHnd,
  kCrossLayer,
  kFlashInfer,
  kPacked,
  kMla,
};

// Every kind, in enum order.
inline constexpr KvLayoutKind kAllKvLayoutKinds[] = {
    KvLayoutKind::kVllmNhd,    KvLayoutKind::kVllmHnd, KvLayoutKind::kCrossLayer,
    KvLayoutKind::kFlashInfer, KvLayoutKind::kPacked,  KvLayoutKind::kMla};

// "nhd", "hnd", "cross_layer", "flashinfer", "packed", "mla".
KVTIER_EXPORT std::string_view KvLayoutKindName(KvLayoutKind kind);
KVTIER_EXPORT Result<KvLayoutKind> ParseKvLayoutKind(std::string_view name);

struct KVTIER_EXPORT KvLayout {
  KvLayoutKind kind = KvLayoutKind::kVllmNhd;
  uint32_t num_layers = 1;
  uint32_t num_blocks = 1;  // pages in the engine's pool
  uint32_t block_tokens = 16;
  uint32_t num_kv_heads = 1;  // 1 for kMla
  uint32_t head_size = 64;    // kMla: kv_lora_rank + rope_dim
  uint32_t elem_bytes = 2;    // 2 for fp16/bf16, 1 for fp8, 4 for fp32

  // 2 (K and V) for every kind but kMla, which has 1.
  uint32_t Planes() const { return kind == KvLayoutKind::kMla ? 1 : 2; }
  // Bytes of one block in the canonical host format.
  uint64_t BlockBytes() const { return uint64_t{num_layers} * Planes() * PageBytes(); }
  // Bytes of one (layer, plane) page of one block.
  uint64_t PageBytes() const {
    return uint64_t{block_tokens} * num_kv_heads * head_size * elem_bytes;
  }
  // "nhd:L4:H2:D64:T16:E2": folded into the namespace id.
  std::string Signature() const;
  // Rejects unknown kinds, zero dimensions, unknown element sizes, kMla with
  // more than one head, and sizes that overflow.
  Status Validate() const;
};

// The layout of an engine cache registered as `num_tensors` tensors (one per
// layer; exactly 1 for kCrossLayer) of physical shape `shape` (outermost
// first, see the table above) and `elem_bytes`-byte elements. Shapes that do
// not match `kind` are rejected with InvalidArgument naming the expected and
// the given shape; nothing is guessed.
KVTIER_EXPORT Result<KvLayout> KvLayoutFromShape(KvLayoutKind kind, std::span<const uint64_t> shape,
                                                 uint32_t num_tensors, uint32_t elem_bytes);

// Byte offset of element (layer, kv, token, head, 0) of `block` in the engine
// tensor holding that layer (per-layer layouts) or in the single cross-layer
// tensor. kv is 0 for K, 1 for V (always 0 for kMla, whose head is also 0).
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
