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
  }
  return "unknown";
}

Result<KvLayoutKind> ParseKvLayoutKind(std::string_view name) {
  for (KvLayoutKind kind :
       {KvLayoutKind::kVllmNhd, KvLayoutKind::kVllmHnd, KvLayoutKind::kCrossLayer}) {
    if (name == KvLayoutKindName(kind)) return kind;
  }
  std::string m("unknown kv layout '");
  m += name;
  m += "'; valid layouts: nhd, hnd, cross_layer";
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
  if (kind != KvLayoutKind::kVllmNhd && kind != KvLayoutKind::kVllmHnd &&
      kind != KvLayoutKind::kCrossLayer) {
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
  // The whole cache (every engine tensor together) bounds each tensor, so
  // checking it covers EngineTensorBytes() for every kind.
  uint64_t bytes = 2;
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
  uint64_t elem = 0;
  switch (layout.kind) {
    case KvLayoutKind::kVllmNhd:  // (2, num_blocks, block_tokens, num_kv_heads, head_size)
      elem = ((kv * n + block) * t + token) * h + head;
      break;
    case KvLayoutKind::kVllmHnd:  // (2, num_blocks, num_kv_heads, block_tokens, head_size)
      elem = ((kv * n + block) * h + head) * t + token;
      break;
    case KvLayoutKind::kCrossLayer:  // (num_blocks, num_layers, 2, tokens, heads, head_size)
      elem = (((uint64_t{block} * layout.num_layers + layer) * 2 + kv) * t + token) * h + head;
      break;
  }
  return elem * layout.head_size * layout.elem_bytes;
}

uint64_t HostOffset(const KvLayout& layout, uint32_t layer, uint32_t kv, uint32_t token,
                    uint32_t head) {
  // (num_layers, 2, block_tokens, num_kv_heads, head_size)
  const uint64_t elem =
      ((uint64_t{layer} * 2 + kv) * layout.block_tokens + token) * layout.num_kv_heads + head;
  return elem * layout.head_size * layout.elem_bytes;
}

uint64_t EngineTensorBytes(const KvLayout& layout) {
  const uint64_t per_layer = 2 * uint64_t{layout.num_blocks} * layout.PageBytes();
  return layout.kind == KvLayoutKind::kCrossLayer ? per_layer * layout.num_layers : per_layer;
}

uint32_t EngineTensorCount(const KvLayout& layout) {
  return layout.kind == KvLayoutKind::kCrossLayer ? 1 : layout.num_layers;
}

}  // namespace kvtier
