#include "gpu/layout_runs.h"

#include <algorithm>
#include <string>
#include <utility>

namespace kvtier::internal {
namespace {

// Appends `run`, extending the last run instead when it was appended by the
// same call (index >= first) and continues it on both sides.
void PushRun(const CopyRun& run, size_t first, std::vector<CopyRun>* runs) {
  if (runs->size() > first) {
    CopyRun& last = runs->back();
    if (last.tensor == run.tensor && last.engine_offset + last.bytes == run.engine_offset &&
        last.host_offset + last.bytes == run.host_offset) {
      last.bytes += run.bytes;
      return;
    }
  }
  runs->push_back(run);
}

uint32_t TensorOf(const KvLayout& layout, uint32_t layer) {
  return layout.kind == KvLayoutKind::kCrossLayer ? 0 : layer;
}

// One run per (kv, token, head) row of head_size elements, walked in host
// order; PushRun folds rows that are also adjacent in the engine (HND and
// packed only in degenerate shapes) into longer runs.
void AppendLayerRows(const KvLayout& layout, uint32_t block, uint32_t layer, size_t first,
                     std::vector<CopyRun>* runs) {
  const uint64_t row_bytes = uint64_t{layout.head_size} * layout.elem_bytes;
  const uint32_t tensor = TensorOf(layout, layer);
  for (uint32_t kv = 0; kv < layout.Planes(); ++kv) {
    for (uint32_t token = 0; token < layout.block_tokens; ++token) {
      for (uint32_t head = 0; head < layout.num_kv_heads; ++head) {
        PushRun({tensor, EngineOffset(layout, block, layer, kv, token, head),
                 HostOffset(layout, layer, kv, token, head), row_bytes},
                first, runs);
      }
    }
  }
}

// NHD, FlashInfer, cross-layer and MLA pages are contiguous in the engine,
// so they are emitted page by page without walking the rows; FlashInfer's K
// and V pages of a block are adjacent and merge into one run.
void AppendLayerPages(const KvLayout& layout, uint32_t block, uint32_t layer, size_t first,
                      std::vector<CopyRun>* runs) {
  const uint32_t tensor = TensorOf(layout, layer);
  for (uint32_t kv = 0; kv < layout.Planes(); ++kv) {
    PushRun({tensor, EngineOffset(layout, block, layer, kv, 0, 0),
             HostOffset(layout, layer, kv, 0, 0), layout.PageBytes()},
            first, runs);
  }
}

void AppendLayer(const KvLayout& layout, uint32_t block, uint32_t layer, size_t first,
                 std::vector<CopyRun>* runs) {
  if (layout.kind == KvLayoutKind::kVllmHnd || layout.kind == KvLayoutKind::kPacked) {
    AppendLayerRows(layout, block, layer, first, runs);
  } else {
    AppendLayerPages(layout, block, layer, first, runs);
  }
}

}  // namespace

void AppendLayerRuns(const KvLayout& layout, uint32_t block, uint32_t layer,
                     std::vector<CopyRun>* runs) {
  AppendLayer(layout, block, layer, runs->size(), runs);
}

void AppendBlockRuns(const KvLayout& layout, uint32_t block, std::vector<CopyRun>* runs) {
  const size_t first = runs->size();
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    AppendLayer(layout, block, layer, first, runs);
  }
}

Status CheckBlockCopy(const KvLayout& layout, uint32_t engine_block, uint64_t host_bytes) {
  if (engine_block >= layout.num_blocks) {
    return Status::InvalidArgument("engine block " + std::to_string(engine_block) +
                                   " out of range [0, " + std::to_string(layout.num_blocks) + ")");
  }
  if (host_bytes != layout.BlockBytes()) {
    return Status::InvalidArgument("host buffer is " + std::to_string(host_bytes) +
                                   " bytes; a block is " + std::to_string(layout.BlockBytes()) +
                                   " bytes");
  }
  return Status::Ok();
}

Status CheckBlockCopies(const KvLayout& layout, std::span<const BlockCopy> copies,
                        bool unique_blocks) {
  for (size_t i = 0; i < copies.size(); ++i) {
    Status st = CheckBlockCopy(layout, copies[i].engine_block, copies[i].host.size());
    if (!st.ok()) return st.WithContext("copy " + std::to_string(i));
  }
  if (!unique_blocks || copies.size() < 2) return Status::Ok();
  // Sorting (block, index) pairs groups the copies of each block, earliest
  // first; a group's second entry is its first repeat. The repeat with the
  // smallest index across groups is reported.
  std::vector<std::pair<uint32_t, size_t>> order;
  order.reserve(copies.size());
  for (size_t i = 0; i < copies.size(); ++i) order.emplace_back(copies[i].engine_block, i);
  std::sort(order.begin(), order.end());
  size_t first_index = 0;
  size_t repeat_index = copies.size();
  for (size_t group = 0; group < order.size();) {
    size_t end = group + 1;
    while (end < order.size() && order[end].first == order[group].first) ++end;
    if (end - group > 1 && order[group + 1].second < repeat_index) {
      first_index = order[group].second;
      repeat_index = order[group + 1].second;
    }
    group = end;
  }
  if (repeat_index == copies.size()) return Status::Ok();
  return Status::InvalidArgument("copy " + std::to_string(repeat_index) + ": engine block " +
                                 std::to_string(copies[repeat_index].engine_block) +
                                 " already targeted by copy " + std::to_string(first_index));
}

}  // namespace kvtier::internal
