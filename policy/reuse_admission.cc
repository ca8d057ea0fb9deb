// Learned reuse admission. Every request's chain is recorded (ids are
// prefix-chained, so the chain is a path of the radix tree); every block
// remembers its class when it was last named: how many requests had named it
// (1, 2, 3+) and, for a block named once, the length class of the request
// that brought it. When a later request names the block again, its class
// scores one reuse. The tree sees every request, stored or not, so the rates
// are learned from refused blocks as well and no exploration is needed.
//
// A block is admitted when its class's learned rate of being named again is
// at least `reuse_ratio` times the average rate of first-named blocks. In the
// agentic traces the reuse of a once-named block is flat over depth and
// branch offset but rises with the length of the request that brought it
// (long new contexts are queried again, short suffixes are not), and the
// chance of a third sighting after a second differs by trace (docs/
// BENCHMARKS.md): learned, not fixed, so both regimes are served.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <unordered_map>

#include "policy/policy_internal.h"

namespace kvtier::internal {
namespace {

constexpr size_t kLengthClasses = 24;            // quarter-octaves of the chain length
constexpr size_t kClasses = kLengthClasses + 2;  // + "named twice" + "named 3+ times"

struct Rate {
  double named = 0;    // blocks that entered the class
  double renamed = 0;  // of those, named again while in it
};

class ReuseAdmission final : public AdmissionPolicy {
 public:
  explicit ReuseAdmission(const PolicyKnobs& k)
      : ratio_(k.reuse_ratio),
        spread_(k.reuse_spread),
        min_samples_(k.reuse_min_samples),
        half_life_(k.reuse_half_life) {}
  std::string_view Name() const override { return "reuse"; }

  void ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks, const RequestHints&,
                      uint64_t) override {
    if (nodes_.size() > kMaxNodes) nodes_.clear();  // bounded memory: start over
    const uint8_t length_class = LengthClass(chain.size());
    // One coin per request: its new path is admitted or refused as a whole,
    // so the prefix rule never forces a refused parent onto the tier.
    const float coin = chain.empty() ? 0.0f : float(Mix64(chain.back() ^ kSalt) >> 40) * 0x1p-24f;
    for (size_t i = 0; i < chain.size(); ++i) {
      auto [it, fresh] = nodes_.try_emplace(chain[i]);
      Node& n = it->second;
      if (!fresh) rates_[n.cls].renamed += 1;
      n.sightings = fresh ? 1 : std::min<uint32_t>(n.sightings + 1, 3);
      n.cls = n.sightings == 1 ? length_class : uint8_t(kLengthClasses + n.sightings - 2);
      n.partial = i >= full_blocks;
      if (fresh) n.coin = coin;
      Enter(n.cls);
    }
  }

  bool Admit(const BlockMeta& block, const TierState&) override {
    auto it = nodes_.find(block.id);
    if (it == nodes_.end()) return block.sightings >= 2;
    const Node& n = it->second;
    if (n.partial) return false;  // a request's partial last block: reused ~1-5 %
    const Rate& r = rates_[n.cls];
    if (r.named < double(min_samples_)) return true;  // not learned yet
    const double base = FirstSightingRate();
    if (base <= 0) return true;
    // Admit probability rises linearly from 0 at (ratio - spread) x base to
    // 1 at (ratio + spread) x base; spread 0 is a hard cut at ratio x base.
    const double rel = r.renamed / r.named / base;
    if (spread_ <= 0) return rel >= ratio_;
    const double p = std::clamp((rel - (ratio_ - spread_)) / (2 * spread_), 0.0, 1.0);
    return n.coin < p;
  }

 private:
  struct Node {
    uint32_t sightings = 0;
    uint8_t cls = 0;
    bool partial = false;
    float coin = 0;  // the naming request's coin, uniform in [0, 1)
  };

  static uint8_t LengthClass(size_t blocks) {
    const double q = 4.0 * std::log2(double(std::max<size_t>(blocks, 1)));
    return static_cast<uint8_t>(std::min<double>(kLengthClasses - 1, q));
  }
  // Counts decay so the rates follow a drifting workload: every
  // `half_life_` entries all counts halve.
  void Enter(uint8_t cls) {
    rates_[cls].named += 1;
    if (half_life_ != 0 && ++entries_ >= half_life_) {
      for (Rate& r : rates_) r = {r.named / 2, r.renamed / 2};
      entries_ = 0;
    }
  }
  double FirstSightingRate() const {
    double named = 0, renamed = 0;
    for (size_t c = 0; c < kLengthClasses; ++c) {
      named += rates_[c].named;
      renamed += rates_[c].renamed;
    }
    return named == 0 ? 0 : renamed / named;
  }

  static constexpr size_t kMaxNodes = size_t{1} << 23;
  static constexpr uint64_t kSalt = 0x7265757365636f69ULL;
  double ratio_;
  double spread_;
  uint32_t min_samples_;
  uint64_t half_life_;
  uint64_t entries_ = 0;
  std::array<Rate, kClasses> rates_{};
  std::unordered_map<uint64_t, Node> nodes_;
};

}  // namespace

Result<std::unique_ptr<AdmissionPolicy>> NewReuseAdmission(const PolicyKnobs& knobs) {
  return std::unique_ptr<AdmissionPolicy>(new ReuseAdmission(knobs));
}

}  // namespace kvtier::internal
