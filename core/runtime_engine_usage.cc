// The engine's GPU KV pool as kvtier sees it: usage reports, the running
// requests and what they hold, admission against the watermark and
// preemption proposals. The ordering and the covering of the target are
// GpuWatermark's (policy/watermark.cc); this file only feeds it what the
// index knows about each request.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/runtime_impl.h"

namespace kvtier::internal {

Status RuntimeImpl::ReportEngineUsage(uint32_t free_blocks, uint32_t total_blocks) {
  if (total_blocks == 0) {
    return Status::InvalidArgument("engine usage: total_blocks is 0; expected the pool size");
  }
  if (free_blocks > total_blocks) {
    return Status::InvalidArgument("engine usage: free_blocks " + std::to_string(free_blocks) +
                                   " exceeds total_blocks " + std::to_string(total_blocks));
  }
  std::lock_guard lock(usage_mu_);
  gpu_.Report(free_blocks, total_blocks);
  engine_free_ = free_blocks;
  engine_total_ = total_blocks;
  return Status::Ok();
}

Status RuntimeImpl::TrackRequest(uint64_t request_id, NamespaceId ns,
                                 std::span<const BlockKey> keys, uint32_t engine_blocks) {
  if (keys.size() > engine_blocks) {
    return Status::InvalidArgument("track request " + std::to_string(request_id) + ": " +
                                   std::to_string(keys.size()) + " keys but only " +
                                   std::to_string(engine_blocks) + " engine blocks");
  }
  TrackedRequest r{ns, std::vector<BlockKey>(keys.begin(), keys.end()), engine_blocks};
  std::lock_guard lock(usage_mu_);
  tracked_.insert_or_assign(request_id, std::move(r));
  return Status::Ok();
}

void RuntimeImpl::UntrackRequest(uint64_t request_id) {
  std::lock_guard lock(usage_mu_);
  tracked_.erase(request_id);
}

bool RuntimeImpl::ShouldAdmitNewRequest(uint32_t blocks_needed) {
  std::lock_guard lock(usage_mu_);
  return gpu_.ShouldAdmit(blocks_needed);
}

std::vector<PreemptionVictim> RuntimeImpl::ProposePreemption(uint32_t blocks_to_free) {
  std::lock_guard usage_lock(usage_mu_);
  // Blocks to free so that the watermark's share of the pool is free again.
  uint64_t target = blocks_to_free;
  if (engine_total_ != 0) {
    const uint64_t keep = gpu_.KeepBlocks(engine_total_);
    if (keep > engine_free_) target = std::max<uint64_t>(target, keep - engine_free_);
  }
  if (target == 0) return {};

  // The policy sees each request's cost as the engine blocks it holds that
  // kvtier does not: those must be saved now or recomputed later. gpu_ runs
  // at one "FLOP" per second, so its restore cost is exactly that count.
  // mu_ is taken for one request at a time: hundreds of running requests
  // of thousands of blocks each would otherwise hold every lookup and save
  // for the whole scan. Each prefix is a snapshot either way (a save may
  // land right after it is read).
  std::vector<RunningRequest> running;
  std::unordered_map<uint64_t, uint32_t> saved;  // request id -> saved prefix
  // Once shut down nothing loads (IsSaved is false): a victim reported as
  // saved would be freed by the engine for good.
  const bool shut_down = shut_down_.load(std::memory_order_acquire);
  for (const auto& [id, r] : tracked_) {
    if (r.engine_blocks == 0) continue;  // frees nothing
    uint32_t s = 0;
    if (!shut_down) {
      std::lock_guard lock(mu_);
      s = SavedPrefixLocked(r.ns, r.keys);
    }
    if (after_saved_prefix_) after_saved_prefix_();
    saved.emplace(id, s);
    running.push_back({.request_id = id,
                       .blocks_held = r.engine_blocks,
                       .tokens = r.engine_blocks,
                       .saved_tokens = s,
                       .restore_load_s = 0,
                       .recompute_flops = double(r.engine_blocks - s)});
  }
  const uint32_t need = uint32_t(std::min<uint64_t>(target, UINT32_MAX));
  std::vector<PreemptionVictim> out;
  for (const PreemptionProposal& p : gpu_.Propose(running, need)) {
    const TrackedRequest& r = tracked_.at(p.request_id);
    const uint32_t s = saved.at(p.request_id);
    PreemptionVictim v;
    v.request_id = p.request_id;
    v.ns = r.ns;
    v.blocks_freed = p.blocks_freed;
    v.saved_blocks = s;
    v.keys = r.keys;
    if (s > 0) v.parent = r.keys[s - 1];
    v.unsaved_keys.assign(r.keys.begin() + s, r.keys.end());
    out.push_back(std::move(v));
  }
  metrics_.AddPreemptionProposals(out.size());
  return out;
}

bool RuntimeImpl::IsSaved(NamespaceId ns, std::span<const BlockKey> keys) {
  // A shut-down runtime loads nothing: blocks an engine frees on its word
  // could never come back.
  if (shut_down_) return false;
  std::lock_guard lock(mu_);
  return SavedPrefixLocked(ns, keys) == keys.size();
}

}  // namespace kvtier::internal
