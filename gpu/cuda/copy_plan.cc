// Plan building for the CUDA copy engine (copy_plan.h).
#include "gpu/cuda/copy_plan.h"

#include <algorithm>
#include <vector>

#include "gpu/cuda/cuda_util.h"
#include "gpu/layout_runs.h"

namespace kvtier::cuda {

uint64_t LayerRunBytes(const KvLayout& layout) {
  std::vector<internal::CopyRun> runs;
  internal::AppendLayerRuns(layout, 0, 0, &runs);
  return layout.Planes() * layout.PageBytes() / std::max<size_t>(runs.size(), 1);
}

void MakePlan(const CudaCopyEngineOptions& options, uint64_t layer_run_bytes, Batch& batch,
              bool allow_kernel) {
  Plan& plan = batch.plan;
  const std::span<const BlockCopy> copies = batch.copies;
  std::vector<uint64_t> host(copies.size());
  plan.pinned = true;
  for (size_t i = 0; i < copies.size(); ++i) {
    if (!batch.results[i].ok()) continue;
    void* dev = MappedDeviceRange(copies[i].host.data(), copies[i].host.size());
    plan.pinned = plan.pinned && dev != nullptr;
    host[i] = reinterpret_cast<uint64_t>(dev);
  }
  const bool want_kernel =
      allow_kernel &&
      (options.path == CudaCopyPath::kKernel ||
       (options.path == CudaCopyPath::kAuto && layer_run_bytes < options.kernel_max_run_bytes));
  plan.kernel = want_kernel && plan.pinned;
  if (!plan.kernel) {
    for (size_t i = 0; i < copies.size(); ++i) {
      host[i] = reinterpret_cast<uint64_t>(copies[i].host.data());
    }
  }
  plan.copies = copies.size();
  plan.segments = batch.gather ? 1 : options.layout.num_layers;
  std::vector<internal::CopyRun> runs;
  for (size_t s = 0; s < plan.segments; ++s) {
    for (size_t i = 0; i < copies.size(); ++i) {
      plan.starts.push_back(plan.pieces.size());
      if (!batch.results[i].ok()) continue;
      runs.clear();
      if (batch.gather) {
        internal::AppendBlockRuns(options.layout, copies[i].engine_block, &runs);
      } else {
        internal::AppendLayerRuns(options.layout, copies[i].engine_block, static_cast<uint32_t>(s),
                                  &runs);
      }
      for (const internal::CopyRun& r : runs) {
        const uint64_t engine =
            reinterpret_cast<uint64_t>(options.tensors[r.tensor]) + r.engine_offset;
        const uint64_t h = host[i] + r.host_offset;
        plan.pieces.push_back(batch.gather ? CopyPiece{h, engine, r.bytes}
                                           : CopyPiece{engine, h, r.bytes});
      }
    }
  }
  plan.starts.push_back(plan.pieces.size());
}

}  // namespace kvtier::cuda
