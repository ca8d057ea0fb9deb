// Learned reuse admission (policy/reuse_model.h learns the rates). A block
// is admitted when its class's learned rate of being named again is at least
// `reuse_ratio` times the average rate of first-named blocks. The classes
// that matter differ by trace (docs/BENCHMARKS.md): learned, not fixed, so
// both regimes are served.
#include <algorithm>

#include "policy/policy_internal.h"
#include "policy/reuse_model.h"

namespace kvtier::internal {
namespace {

class ReuseAdmission final : public ObservesReuse<AdmissionPolicy> {
 public:
  ReuseAdmission(const PolicyKnobs& k, std::shared_ptr<ReuseModel> shared)
      : ObservesReuse(k, std::move(shared)),
        ratio_(k.reuse_ratio),
        spread_(k.reuse_spread),
        fill_share_(k.reuse_fill_share) {}
  std::string_view Name() const override { return "reuse"; }

  bool Admit(const BlockMeta& block, const TierState& tier) override {
    const ReuseModel::Look look = model_.LookUp(block.id);
    if (!look.known) return block.sightings >= 2;
    if (look.partial) return false;  // a request's partial last block: reused ~1-5 %
    // Filling free space costs the device's endurance but evicts nothing.
    if (Below(tier, fill_share_)) return true;
    const double rate = look.rate;
    if (rate < 0) return true;  // not learned yet
    const double base = model_.FirstSightingRate();
    if (base <= 0) return true;
    // Admit probability rises linearly from 0 at (ratio - spread) x base to
    // 1 at (ratio + spread) x base; spread 0 is a hard cut at ratio x base.
    const double rel = rate / base;
    // Once the tier is (nearly) full every write evicts a resident: then only
    // classes at least as likely as the average first-named block to come
    // back are worth it, whatever a lower ratio admits into free space.
    const bool full = tier.capacity_bytes != 0 && !Below(tier, kFullShare);
    const double ratio = full ? std::max(ratio_, 1.0) : ratio_;
    if (spread_ <= 0) return rel >= ratio;
    const double p = std::clamp((rel - (ratio - spread_)) / (2 * spread_), 0.0, 1.0);
    return look.coin < p;
  }

 private:
  // Eviction frees a batch at a time, so "full" is a share, not equality.
  static constexpr double kFullShare = 0.95;
  static bool Below(const TierState& t, double share) {
    return double(t.used_bytes) < share * double(t.capacity_bytes);
  }
  double ratio_;
  double spread_;
  double fill_share_;
};

}  // namespace

Result<std::unique_ptr<AdmissionPolicy>> NewReuseAdmission(const PolicyKnobs& knobs,
                                                           std::shared_ptr<ReuseModel> shared) {
  return std::unique_ptr<AdmissionPolicy>(new ReuseAdmission(knobs, std::move(shared)));
}

}  // namespace kvtier::internal
