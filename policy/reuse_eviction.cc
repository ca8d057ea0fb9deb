// `reuse` eviction: hyperbolic caching over the learned reuse classes. A
// candidate's priority is its class's learned rate of being named again
// divided by the time since its last use raised to `reuse_age_exponent`; the
// lowest priority leaves first. With one rate for all it is LRU; with learned
// rates a block of a class that comes back (e.g. the context of a tool-call
// turn) outlives one that does not, and still ages out if it is not used.
// The default exponent 0.5 lets the class weigh more than plain hyperbolic
// (1) does: a tier that holds thousands of requests' blocks sees reuse lags
// spread far wider than the class rates differ, and at synthetic 5/30 the
// sweep's hit rate is 58.97 % at 0.5 against 58.56 % at 1 (docs/BENCHMARKS.md).
//
// Blocks first named by a request that is still decoding leave after all the
// others (LRU among them): the engine still holds them, and once the request
// finishes its output length tells their class, so the lower tier's `reuse`
// admission judges them by it instead of by the request length. This applies
// only once the engine reports finishes (ObserveFinish); without them the
// order is rate / age alone.
//
// Ahead of all of that leave the blocks a slower tier also holds (`backed`):
// dropping such a copy costs no write and keeps the hit, which the slower
// tier then serves, so the room goes to blocks that exist only here, which
// then have longer to be judged. In the sweep this did not move hits to the
// slower tier: synthetic 5/30 hub hits went from 12.80 to 12.92 % of tokens
// and modeled TTFT p99 from 634 to 627 s (docs/BENCHMARKS.md).
#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "policy/policy_internal.h"
#include "policy/reuse_model.h"

namespace kvtier::internal {
namespace {

class ReuseEviction final : public ObservesReuse<EvictionPolicy> {
 public:
  ReuseEviction(const PolicyKnobs& k, std::shared_ptr<ReuseModel> shared)
      : ObservesReuse(k, std::move(shared)), exponent_(k.reuse_age_exponent) {}
  std::string_view Name() const override { return "reuse"; }

  void Order(std::span<BlockMeta> c, uint64_t now_ns) override {
    const double base = model_.FirstSightingRate();
    const double fallback = base > 0 ? base : 1.0;  // unknown class: the average
    // rate / idle^e orders as rate^(1/e) / idle (a monotone map of
    // non-negative keys), which needs no pow per candidate at e = 1 or 0.5.
    OrderByKeys(c, [&](const BlockMeta& b) {
      const double idle = double(now_ns > b.last_use_ns ? now_ns - b.last_use_ns : 0) + 1.0;
      const ReuseModel::Look look = model_.LookUp(b.id);
      const double rate = look.unfinished ? 1.0 : look.rate;
      return std::tuple<bool, bool, double>{!b.backed, look.unfinished,
                                            Lift(rate < 0 ? fallback : rate) / idle};
    });
  }

 private:
  double Lift(double rate) const {
    if (exponent_ == 1.0) return rate;
    if (exponent_ == 0.5) return rate * rate;
    return std::pow(rate, 1.0 / exponent_);
  }
  double exponent_;
};

}  // namespace

Result<std::unique_ptr<EvictionPolicy>> NewReuseEviction(const PolicyKnobs& knobs,
                                                         std::shared_ptr<ReuseModel> shared) {
  return std::unique_ptr<EvictionPolicy>(new ReuseEviction(knobs, std::move(shared)));
}

}  // namespace kvtier::internal
