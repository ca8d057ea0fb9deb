#include "gpu/layout_runs.h"

#include <algorithm>
#include <cstdint>
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

// HND and packed pages are strided in the engine: one run per row.
bool WalksRows(const KvLayout& layout) {
  return layout.kind == KvLayoutKind::kVllmHnd || layout.kind == KvLayoutKind::kPacked;
}

void AppendLayer(const KvLayout& layout, uint32_t block, uint32_t layer, size_t first,
                 std::vector<CopyRun>* runs) {
  if (WalksRows(layout)) {
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

uint64_t MaxLayerRuns(const KvLayout& layout) {
  const uint64_t planes = layout.Planes();
  return WalksRows(layout) ? planes * layout.block_tokens * layout.num_kv_heads : planes;
}

uint64_t MaxBlockRuns(const KvLayout& layout) {
  return uint64_t{layout.num_layers} * MaxLayerRuns(layout);
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

namespace {

std::string CopyName(std::span<const BlockCopy> copies, size_t i) {
  return "copy " + std::to_string(i) + " (engine block " + std::to_string(copies[i].engine_block) +
         ")";
}

// Sorting (key, index) pairs groups equal keys, earliest index first; every
// later member of a group is a repeat of the group's first.
void FailRepeatedBlocks(std::span<const BlockCopy> copies, std::vector<Status>& results) {
  std::vector<std::pair<uint32_t, size_t>> order;
  order.reserve(copies.size());
  for (size_t i = 0; i < copies.size(); ++i) {
    if (results[i].ok()) order.emplace_back(copies[i].engine_block, i);
  }
  std::sort(order.begin(), order.end());
  size_t first = 0;  // the first copy of the current engine block
  for (size_t k = 1; k < order.size(); ++k) {
    if (order[k].first != order[k - 1].first) {
      first = k;
      continue;
    }
    // Named by the engine block first: it is what the caller repeated.
    results[order[k].second] = Status::InvalidArgument(
        CopyName(copies, order[k].second) + ": engine block " + std::to_string(order[k].first) +
        " is already the target of copy " + std::to_string(order[first].second));
  }
}

// Sweeps the buffers in address order keeping the ones accepted so far
// pairwise disjoint; the last accepted one then reaches furthest, so a buffer
// overlaps an accepted one exactly when it starts before that one's end. Of
// such a pair the copy with the larger index fails.
void FailOverlappingHosts(std::span<const BlockCopy> copies, std::vector<Status>& results) {
  std::vector<std::pair<uintptr_t, size_t>> order;
  order.reserve(copies.size());
  for (size_t i = 0; i < copies.size(); ++i) {
    if (results[i].ok()) order.emplace_back(reinterpret_cast<uintptr_t>(copies[i].host.data()), i);
  }
  std::sort(order.begin(), order.end());
  bool have_last = false;
  size_t last = 0;  // the accepted copy that reaches furthest
  for (const auto& [start, i] : order) {
    if (have_last &&
        start < reinterpret_cast<uintptr_t>(copies[last].host.data()) + copies[last].host.size()) {
      const size_t loser = std::max(i, last);
      results[loser] = Status::InvalidArgument(CopyName(copies, loser) +
                                               ": host buffer overlaps the one of copy " +
                                               std::to_string(std::min(i, last)));
      if (loser == i) continue;
    }
    // Either nothing overlaps, or `last` lost and `i` (disjoint from every
    // accepted buffer before `last`) takes its place.
    last = i;
    have_last = true;
  }
}

}  // namespace

std::vector<Status> CheckEachBlockCopy(const KvLayout& layout, std::span<const BlockCopy> copies,
                                       bool unique_blocks, bool disjoint_hosts) {
  std::vector<Status> results(copies.size());
  for (size_t i = 0; i < copies.size(); ++i) {
    Status st = CheckBlockCopy(layout, copies[i].engine_block, copies[i].host.size());
    if (st.ok()) continue;
    // The range message names the block already.
    results[i] =
        st.WithContext(copies[i].engine_block >= layout.num_blocks ? "copy " + std::to_string(i)
                                                                   : CopyName(copies, i));
  }
  if (unique_blocks) FailRepeatedBlocks(copies, results);
  if (disjoint_hosts) FailOverlappingHosts(copies, results);
  return results;
}

}  // namespace kvtier::internal
