#include "kvtier/kv_layout.h"

#include <string>

namespace kvtier {
namespace {

// Offsets are computed in uint64_t; capping every engine allocation at 2^48
// bytes keeps every intermediate product of the offset functions far from
// wrapping and matches the address width of current GPUs and CPUs.
constexpr uint64_t kMaxCacheBytes = uint64_t{1} << 48;

// Multiplies into *acc, returning false once the product would exceed
// `limit`. The bound is checked by division first so the product never wraps.
bool MulWithin(uint64_t* acc, uint64_t factor, uint64_t limit) {
  if (factor != 0 && *acc > limit / factor) return false;
  *acc *= factor;
  return true;
}

Status ZeroField(std::string_view field) {
  std::string m("kv layout: ");
  m += field;
  m += " is 0";
  return Status::InvalidArgument(m);
}

}  // namespace

std::string_view KvLayoutKindName(KvLayoutKind kind) {
  switch (kind) {
    case KvLayoutKind::kVllmNhd:
      return "nhd";
    case KvLayoutKind::kVllmHnd:
      return "hnd";
    case KvLayoutKind::kCrossLayer:
      return "cross_layer";
    case KvLayoutKind::kFlashInfer:
      return "flashinfer";
    case KvLayoutKind::kPacked:
      return "packed";
    case KvLayoutKind::kMla:
      return "mla";
  }
  return "unknown";
}

Result<KvLayoutKind> ParseKvLayoutKind(std::string_view name) {
  for (KvLayoutKind kind : kAllKvLayoutKinds) {
    if (name == KvLayoutKindName(kind)) return kind;
  }
  std::string m("unknown kv layout '");
  m += name;
  m += "'; valid layouts: nhd, hnd, cross_layer, flashinfer, packed, mla";
  return Status::InvalidArgument(m);
}

std::string KvLayout::Signature() const {
  std::string s(KvLayoutKindName(kind));
  s += ":L" + std::to_string(num_layers);
  s += ":H" + std::to_string(num_kv_heads);
  s += ":D" + std::to_string(head_size);
  s += ":T" + std::to_string(block_tokens);
  s += ":E" + std::to_string(elem_bytes);
  return s;
}

Status KvLayout::Validate() const {
  if (static_cast<unsigned>(kind) > static_cast<unsigned>(KvLayoutKind::kMla)) {
    return Status::InvalidArgument("kv layout: unknown layout kind " +
                                   std::to_string(static_cast<unsigned>(kind)));
  }
  if (num_layers == 0) return ZeroField("num_layers");
  if (num_blocks == 0) return ZeroField("num_blocks");
  if (block_tokens == 0) return ZeroField("block_tokens");
  if (num_kv_heads == 0) return ZeroField("num_kv_heads");
  if (head_size == 0) return ZeroField("head_size");
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4) {
    return Status::InvalidArgument("kv layout: elem_bytes is " + std::to_string(elem_bytes) +
                                   "; must be 1, 2 or 4");
  }
  if (kind == KvLayoutKind::kMla && num_kv_heads != 1) {
    return Status::InvalidArgument(
        "kv layout: mla stores one latent vector per token; num_kv_heads is " +
        std::to_string(num_kv_heads) + " but must be 1 (head_size is kv_lora_rank + rope_dim)");
  }
  // The whole cache (every engine tensor together) bounds each tensor, so
  // checking it covers EngineTensorBytes() for every kind.
  uint64_t bytes = Planes();
  for (uint64_t factor : {uint64_t{num_layers}, uint64_t{num_blocks}, uint64_t{block_tokens},
                          uint64_t{num_kv_heads}, uint64_t{head_size}, uint64_t{elem_bytes}}) {
    if (!MulWithin(&bytes, factor, kMaxCacheBytes)) {
      return Status::InvalidArgument(
          "kv layout: engine cache size (num_blocks * BlockBytes()) exceeds 2^48 bytes");
    }
  }
  return Status::Ok();
}

uint64_t EngineOffset(const KvLayout& layout, uint32_t block, uint32_t layer, uint32_t kv,
                      uint32_t token, uint32_t head) {
  const uint64_t n = layout.num_blocks;
  const uint64_t t = layout.block_tokens;
  const uint64_t h = layout.num_kv_heads;
  const uint64_t d = layout.head_size;
  uint64_t elem = 0;  // in elements
  switch (layout.kind) {
    case KvLayoutKind::kVllmNhd:  // (2, N, T, H, D)
      elem = (((kv * n + block) * t + token) * h + head) * d;
      break;
    case KvLayoutKind::kVllmHnd:  // (2, N, H, T, D)
      elem = (((kv * n + block) * h + head) * t + token) * d;
      break;
    case KvLayoutKind::kCrossLayer:  // (N, L, 2, T, H, D)
      elem =
          ((((uint64_t{block} * layout.num_layers + layer) * 2 + kv) * t + token) * h + head) * d;
      break;
    case KvLayoutKind::kFlashInfer:  // (N, 2, T, H, D)
      elem = (((uint64_t{block} * 2 + kv) * t + token) * h + head) * d;
      break;
    case KvLayoutKind::kPacked:  // (N, H, T, 2 * D): K row, then V row
      elem = ((uint64_t{block} * h + head) * t + token) * 2 * d + kv * d;
      break;
    case KvLayoutKind::kMla:  // (N, T, D)
      elem = (uint64_t{block} * t + token) * d;
      break;
  }
  return elem * layout.elem_bytes;
}

uint64_t HostOffset(const KvLayout& layout, uint32_t layer, uint32_t kv, uint32_t token,
                    uint32_t head) {
  // (L, planes, T, H, D)
  const uint64_t elem = ((uint64_t{layer} * layout.Planes() + kv) * layout.block_tokens + token) *
                            layout.num_kv_heads +
                        head;
  return elem * layout.head_size * layout.elem_bytes;
}

uint64_t EngineTensorBytes(const KvLayout& layout) {
  const uint64_t per_layer = uint64_t{layout.num_blocks} * layout.Planes() * layout.PageBytes();
  return layout.kind == KvLayoutKind::kCrossLayer ? per_layer * layout.num_layers : per_layer;
}

uint32_t EngineTensorCount(const KvLayout& layout) {
  return layout.kind == KvLayoutKind::kCrossLayer ? 1 : layout.num_layers;
}

}  // namespace kvtier
