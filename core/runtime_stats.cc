// Runtime::Stats: the index's per-tier counts, the lower tiers' own usage
// and counters, and the engine traffic, in one snapshot.
#include "core/runtime_impl.h"

namespace kvtier::internal {

RuntimeStats RuntimeImpl::Stats() const {
  RuntimeStats out;
  std::vector<TierUsage> usage;
  std::vector<TierCounters> counters;
  for (const auto& t : lower_) {
    usage.push_back(t->Usage());
    counters.push_back(t->Counters());
  }
  std::lock_guard lock(mu_);
  out = stats_;
  for (size_t t = 0; t < tier_count(); ++t) {
    TierStats s;
    const TierCount& c = tier_counts_[t];
    s.hit_blocks = c.hit_blocks;
    s.evicted_blocks = c.evicted;
    s.demoted_blocks = c.demoted;
    s.rejected_blocks = c.rejected;
    s.forced_blocks = c.forced;
    s.flop_alpha = policies_->alpha(t);
    s.alpha_tunings = policies_->alpha_tunings(t);
    if (t == 0) {
      const TierOptions& o = options_.tiers[0];
      s.name = o.name;
      s.type = o.type;
      s.capacity_bytes = uint64_t{arena_->slot_count()} * arena_->slot_bytes();
      s.used_bytes = uint64_t{arena_->used_slots()} * arena_->slot_bytes();
      s.blocks = index_.blocks_in(0);
      s.bytes_written = c.hub_bytes_in;
      s.blocks_written = c.hub_blocks_in;
      s.bytes_read = c.hub_bytes_out + c.hub_bytes_demoted;  // to the engine and down
    } else {
      const Tier& tier = *lower_[t - 1];
      s.name = tier.name();
      s.type = tier.type();
      s.capacity_bytes = usage[t - 1].capacity_bytes;
      s.used_bytes = usage[t - 1].used_bytes;
      s.blocks = usage[t - 1].blocks;
      s.unclaimed_blocks = usage[t - 1].unclaimed_blocks;
      s.unclaimed_bytes = usage[t - 1].unclaimed_bytes;
      s.bytes_read = counters[t - 1].bytes_read;
      s.bytes_written = counters[t - 1].bytes_written;
      s.blocks_written = counters[t - 1].write_blocks;
      s.errors = counters[t - 1].errors;
      s.corruptions = counters[t - 1].corruptions + c.corruptions;
    }
    out.tiers.push_back(std::move(s));
  }
  out.block_tokens = options_.block_tokens;
  RuntimeMetrics::EngineTraffic engine{stats_.saved_blocks,
                                       stats_.saved_blocks * options_.block_bytes, 0,
                                       tier_counts_[0].hub_bytes_out};
  for (const TierCount& c : tier_counts_) engine.loaded_blocks += c.hit_blocks;
  metrics_.Fill(engine, &out);
  return out;
}

}  // namespace kvtier::internal
