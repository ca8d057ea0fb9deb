// How the CUDA copy engine turns one Gather or Scatter into pieces: the
// per-call state (which copies are still live, and why the others failed)
// and the plan of contiguous pieces built from gpu/layout_runs.h. Issuing
// the plan on a stream is cuda_copy_engine.cc's part. Not for use outside
// gpu/cuda.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpu/cuda/copy_kernel.h"
#include "gpu/cuda/event_poller.h"
#include "kvtier/copy_engine.h"

namespace kvtier::cuda {

// The pieces of one call. Segment s (layer s of a Scatter; the one segment
// of a Gather) holds the pieces of copy i at [Begin(s, i), Begin(s, i + 1)).
// Copies that failed their checks have no pieces.
struct Plan {
  std::vector<CopyPiece> pieces;
  std::vector<size_t> starts;  // segments * copies + 1 entries
  size_t copies = 0;
  size_t segments = 0;
  bool kernel = false;  // copy kernel rather than DMA
  bool pinned = false;  // every host buffer with pieces is page-locked

  size_t Begin(size_t s, size_t i) const { return starts[s * copies + i]; }
  std::span<const CopyPiece> Of(size_t s, size_t i) const {
    return {pieces.data() + Begin(s, i), Begin(s, i + 1) - Begin(s, i)};
  }
};

// The kernel's descriptor table, as the host writes it and as kernels read it.
struct Table {
  CopyPiece* host = nullptr;
  const CopyPiece* device = nullptr;
};

constexpr size_t kWholeBatch = ~size_t{0};

// The state of one Gather or Scatter while it is being issued.
struct Batch {
  std::span<const BlockCopy> copies;
  bool gather = false;
  std::vector<Status> results;  // one per copy; OK while the copy is live
  Plan plan;
  // A load abandoned while issuing: its leading layers that landed before,
  // reported by the caller once it holds no lock (on_layer is the engine's).
  size_t landed_layers = 0;

  // Names copy i; loads name the layer too unless `segment` is kWholeBatch.
  std::string What(size_t i, size_t segment) const {
    std::optional<uint32_t> layer;
    if (!gather && segment != kWholeBatch) layer = static_cast<uint32_t>(segment);
    return CopyName(gather, copies[i].engine_block, layer);
  }
  void FailCopy(size_t i, size_t segment, const Status& why) {
    results[i] = why.WithContext(What(i, segment));
  }
  // Fails every copy still live.
  void FailLive(size_t segment, const Status& why) {
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i].ok()) FailCopy(i, segment, why);
    }
  }
  bool AnyLive() const {
    return std::any_of(results.begin(), results.end(), [](const Status& s) { return s.ok(); });
  }
};

// Typical contiguous run of one block's layer: what decides between DMA and
// the kernel.
uint64_t LayerRunBytes(const KvLayout& layout);

// Fills batch.plan for the copies still live. Gather: every run of each
// block, one segment. Scatter: layer-major, one segment per layer, so layer
// l's event covers layer l of every block. The kernel is chosen by
// options.path (kAuto: runs shorter than options.kernel_max_run_bytes, given
// `layer_run_bytes` from LayerRunBytes), and only when every host buffer is
// mapped pinned memory, and never when `allow_kernel` is false (no
// descriptor table could be had). REQUIRES: batch.plan is empty.
void MakePlan(const CudaCopyEngineOptions& options, uint64_t layer_run_bytes, Batch& batch,
              bool allow_kernel);

}  // namespace kvtier::cuda
