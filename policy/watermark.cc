// Prefill FLOPs of the model presets and the GPU watermark / preemption
// proposals.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kvtier/policy.h"

namespace kvtier {

double ModelCost::PrefixFlops(uint64_t tokens) const {
  const double l = double(tokens);
  const double d = double(hidden);
  // Per layer: attention projections 8·L·D² plus scores 4·L²·D; MLP 16·L·D².
  return double(layers) * (24.0 * l * d * d + 4.0 * l * l * d);
}

GpuWatermark::GpuWatermark(double watermark, double gpu_flops_per_s)
    : watermark_(watermark >= 0 ? std::min(watermark, 1.0) : 0.0),
      gpu_flops_per_s_(gpu_flops_per_s > 0 && std::isfinite(gpu_flops_per_s) ? gpu_flops_per_s
                                                                             : 0.0) {}

uint64_t GpuWatermark::KeepBlocks(uint32_t total_blocks) const {
  const double exact = watermark_ * double(total_blocks);
  const double nearest = std::round(exact);
  if (std::abs(exact - nearest) <= 1e-9 * std::max(1.0, exact)) return uint64_t(nearest);
  return uint64_t(std::ceil(exact));
}

bool GpuWatermark::ShouldAdmit(uint32_t blocks_needed) const {
  if (total_ == 0) return true;  // nothing reported yet
  if (blocks_needed > free_) return false;
  return free_ - blocks_needed >= KeepBlocks(total_);
}

std::vector<PreemptionProposal> GpuWatermark::Propose(std::span<const RunningRequest> running,
                                                      uint32_t blocks_needed) const {
  std::vector<PreemptionProposal> all;
  all.reserve(running.size());
  for (const RunningRequest& r : running) {
    const double recompute_s = gpu_flops_per_s_ > 0 ? r.recompute_flops / gpu_flops_per_s_ : 0;
    const double cost = r.restore_load_s + recompute_s;
    // NaN would break the sort's ordering (undefined behaviour): dearest.
    all.push_back({r.request_id, r.blocks_held,
                   std::isnan(cost) ? std::numeric_limits<double>::infinity() : cost});
  }
  // Cheapest to restore first; among equals, the one freeing more blocks,
  // then the lower id, so the order is total and reproducible.
  std::sort(all.begin(), all.end(), [](const PreemptionProposal& a, const PreemptionProposal& b) {
    if (a.restore_cost_s != b.restore_cost_s) return a.restore_cost_s < b.restore_cost_s;
    if (a.blocks_freed != b.blocks_freed) return a.blocks_freed > b.blocks_freed;
    return a.request_id < b.request_id;
  });
  std::vector<PreemptionProposal> out;
  uint64_t freed = 0;
  for (const PreemptionProposal& p : all) {
    if (freed >= blocks_needed) break;
    out.push_back(p);
    freed += p.blocks_freed;
  }
  return out;
}

}  // namespace kvtier
