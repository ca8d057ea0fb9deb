// KvLayoutFromShape: turns the shape of a registered engine tensor into a
// KvLayout. Each kind has one expected shape; constant dimensions (the 2 of
// K/V) must match exactly and nothing is inferred from a near miss, because a
// wrong guess would silently move the wrong bytes.

#include <array>
#include <limits>
#include <string>

#include "kvtier/kv_layout.h"

namespace kvtier {
namespace {

// Which KvLayout field each dimension of a kind's shape gives; kTwo marks a
// dimension that must equal 2 and kTwoD one that must equal 2 * head_size.
enum class Dim : uint8_t { kBlocks, kLayers, kTokens, kHeads, kHeadSize, kTwo, kTwoD };

struct ShapeSpec {
  std::array<Dim, 6> dims;
  uint32_t rank;
  const char* text;  // the expected shape, for messages
};

ShapeSpec SpecOf(KvLayoutKind kind) {
  using enum Dim;
  switch (kind) {
    case KvLayoutKind::kVllmNhd:
      return {{kTwo, kBlocks, kTokens, kHeads, kHeadSize},
              5,
              "(2, num_blocks, block_size, num_kv_heads, head_size)"};
    case KvLayoutKind::kVllmHnd:
      return {{kTwo, kBlocks, kHeads, kTokens, kHeadSize},
              5,
              "(2, num_blocks, num_kv_heads, block_size, head_size)"};
    case KvLayoutKind::kCrossLayer:
      return {{kBlocks, kLayers, kTwo, kTokens, kHeads, kHeadSize},
              6,
              "(num_blocks, num_layers, 2, block_size, num_kv_heads, head_size)"};
    case KvLayoutKind::kFlashInfer:
      return {{kBlocks, kTwo, kTokens, kHeads, kHeadSize},
              5,
              "(num_blocks, 2, block_size, num_kv_heads, head_size)"};
    case KvLayoutKind::kPacked:
      return {{kBlocks, kHeads, kTokens, kTwoD},
              4,
              "(num_blocks, num_kv_heads, block_size, 2 * head_size)"};
    case KvLayoutKind::kMla:
      return {
          {kBlocks, kTokens, kHeadSize}, 3, "(num_blocks, block_size, kv_lora_rank + rope_dim)"};
  }
  return {{}, 0, "(unknown kind)"};
}

std::string ShapeText(std::span<const uint64_t> shape) {
  std::string s("(");
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

Status Mismatch(KvLayoutKind kind, const ShapeSpec& spec, std::span<const uint64_t> shape) {
  return Status::InvalidArgument("kv layout: " + std::string(KvLayoutKindName(kind)) +
                                 " expects a tensor of shape " + spec.text + "; got " +
                                 ShapeText(shape));
}

}  // namespace

Result<KvLayout> KvLayoutFromShape(KvLayoutKind kind, std::span<const uint64_t> shape,
                                   uint32_t num_tensors, uint32_t elem_bytes) {
  const ShapeSpec spec = SpecOf(kind);
  if (spec.rank == 0) {
    return Status::InvalidArgument("kv layout: unknown layout kind " +
                                   std::to_string(static_cast<unsigned>(kind)));
  }
  if (shape.size() != spec.rank) return Mismatch(kind, spec, shape);
  for (uint64_t d : shape) {
    if (d == 0 || d > std::numeric_limits<uint32_t>::max()) return Mismatch(kind, spec, shape);
  }
  KvLayout l;
  l.kind = kind;
  l.elem_bytes = elem_bytes;
  l.num_kv_heads = 1;  // kinds without a heads dimension (mla) have one
  l.num_layers = num_tensors;
  uint64_t two_d = 0;
  for (uint32_t i = 0; i < spec.rank; ++i) {
    const auto v = static_cast<uint32_t>(shape[i]);
    switch (spec.dims[i]) {
      case Dim::kBlocks:
        l.num_blocks = v;
        break;
      case Dim::kLayers:
        l.num_layers = v;
        break;
      case Dim::kTokens:
        l.block_tokens = v;
        break;
      case Dim::kHeads:
        l.num_kv_heads = v;
        break;
      case Dim::kHeadSize:
        l.head_size = v;
        break;
      case Dim::kTwo:
        if (v != 2) return Mismatch(kind, spec, shape);
        break;
      case Dim::kTwoD:
        if (v % 2 != 0) return Mismatch(kind, spec, shape);
        two_d = v;
        break;
    }
  }
  if (two_d != 0) l.head_size = static_cast<uint32_t>(two_d / 2);
  const uint32_t want_tensors = kind == KvLayoutKind::kCrossLayer ? 1 : l.num_layers;
  if (num_tensors != want_tensors || num_tensors == 0) {
    return Status::InvalidArgument("kv layout: " + std::string(KvLayoutKindName(kind)) +
                                   (kind == KvLayoutKind::kCrossLayer
                                        ? " is one tensor holding every layer"
                                        : " has one tensor per layer (at least one)") +
                                   "; got " + std::to_string(num_tensors) + " tensors");
  }
  KVTIER_RETURN_IF_ERROR(l.Validate());
  return l;
}

}  // namespace kvtier
