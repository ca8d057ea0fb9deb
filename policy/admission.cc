// Admission policies: always, frequency (count-min doorkeeper), write_budget
// (endurance budget with a self-correcting admit probability) and cost
// (load beats recompute). marconi lives in marconi.cc.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "kvtier/policy.h"
#include "policy/policy_build.h"
#include "policy/policy_internal.h"
#include "policy/reuse_model.h"

namespace kvtier {
namespace {

// Narrower sketches are widened to this (config rejects them).
constexpr uint32_t kMinSketchWidth = 16;

class AlwaysAdmission final : public AdmissionPolicy {
 public:
  std::string_view Name() const override { return "always"; }
  bool Admit(const BlockMeta&, const TierState&) override { return true; }
};

// Count-min sketch of sightings, 4 rows. Every `aging_period` increments all
// counters halve, so blocks popular long ago fade (TinyLFU's reset). The
// period is bounded by the width (PolicyKnobs::SketchAgingLimit): left to
// grow, the counters would fill until ids never seen pass the threshold.
class FrequencyAdmission final : public AdmissionPolicy {
 public:
  explicit FrequencyAdmission(const PolicyKnobs& k)
      : threshold_(k.frequency_threshold),
        width_(std::max<uint32_t>(k.sketch_width, kMinSketchWidth)),
        aging_period_(std::max<uint64_t>(1, k.SketchAgingPeriod())),
        counts_(kRows * static_cast<size_t>(width_), 0) {}
  std::string_view Name() const override { return "frequency"; }

  void ObserveRequest(std::span<const uint64_t> chain, uint32_t, const RequestHints&,
                      uint64_t) override {
    for (uint64_t id : chain) Increment(id);
  }
  bool Admit(const BlockMeta& block, const TierState&) override {
    return Estimate(block.id) >= threshold_;
  }

 private:
  static constexpr size_t kRows = 4;
  size_t Cell(size_t row, uint64_t id) const {
    return row * width_ + internal::Mix64(id + 0x9e3779b97f4a7c15ULL * (row + 1)) % width_;
  }
  void Increment(uint64_t id) {
    for (size_t r = 0; r < kRows; ++r) {
      uint32_t& c = counts_[Cell(r, id)];
      if (c < std::numeric_limits<uint32_t>::max()) ++c;
    }
    if (++increments_ >= aging_period_) {
      for (uint32_t& c : counts_) c >>= 1;
      increments_ = 0;
    }
  }
  uint32_t Estimate(uint64_t id) const {
    uint32_t m = std::numeric_limits<uint32_t>::max();
    for (size_t r = 0; r < kRows; ++r) m = std::min(m, counts_[Cell(r, id)]);
    return m;
  }

  uint32_t threshold_;
  uint32_t width_;
  uint64_t aging_period_;
  uint64_t increments_ = 0;
  std::vector<uint32_t> counts_;
};

// Endurance budget: the device may take `bytes_per_day`, and no more than
// `write_max_bytes_per_s` when set (both after write amplification: the host
// may write them divided by it). Each interval the admit probability is set
// so that the next interval admits its share plus the running credit or debt,
// given the rate at which blocks were offered in the last one; an interval
// with no offers keeps the probability it had. Each interval also has an
// allowance, its share plus credit and never more than the cap allows: once
// spent, nothing more is admitted until the next one, so a rate misjudged
// (after an idle spell, or at the start) cannot burst. Only the blocks the
// rest of a chain admits are offered (Rations). The coin is a hash of the
// block id and a counter, so a run is reproducible.
class WriteBudgetAdmission final : public AdmissionPolicy {
 public:
  WriteBudgetAdmission(const PolicyKnobs& k, uint64_t seed) : seed_(seed) {
    const double wa = std::max(1.0, k.write_amplification);
    target_rate_ = static_cast<double>(k.write_budget_bytes_per_day) / 86400.0 / wa;
    if (k.write_max_bytes_per_s != 0) {
      max_rate_ = static_cast<double>(k.write_max_bytes_per_s) / wa;
      target_rate_ = std::min(target_rate_, max_rate_);
    }
    // Validate refuses a period outside these bounds; clamped so that one
    // built without it cannot overflow.
    interval_ns_ =
        std::clamp<uint64_t>(k.write_interval_ms, 1, PolicyKnobs::kMaxWriteIntervalMs) * 1000000ULL;
    interval_s_ = static_cast<double>(interval_ns_) * 1e-9;
  }
  std::string_view Name() const override { return "write_budget"; }
  bool Rations() const override { return true; }

  bool Admit(const BlockMeta& block, const TierState& tier) override {
    Update(tier.now_ns);
    offered_ += block.bytes;
    const uint64_t h = internal::Mix64(block.id ^ seed_ ^ (++coins_ * 0xd1b54a32d192ed03ULL));
    const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
    if (!(u < probability_) || !(allowance_ > 0)) return false;
    // The last block admitted may overdraw by its size; the next interval's
    // allowance pays it back.
    allowance_ -= static_cast<double>(block.bytes);
    return true;
  }
  void OnWritten(uint64_t bytes, uint64_t now_ns) override {
    Update(now_ns);
    written_total_ += bytes;
  }

 private:
  // Bytes one interval may admit: its share plus the credit (positive) or
  // debt against the budget so far, bounded to one share so a long idle
  // spell cannot unleash a burst, and at most the cap's bytes.
  double Want(uint64_t now_ns) const {
    const double share = target_rate_ * interval_s_;
    const double elapsed_s = static_cast<double>(now_ns - start_ns_) * 1e-9;
    const double credit = target_rate_ * elapsed_s - static_cast<double>(written_total_);
    double want = share + std::clamp(credit, -share, share);
    if (max_rate_ > 0) want = std::min(want, max_rate_ * interval_s_);
    return want;
  }
  void Update(uint64_t now_ns) {
    if (!started_) {
      started_ = true;
      start_ns_ = interval_start_ns_ = now_ns;
      allowance_ = target_rate_ * interval_s_;  // nothing measured yet: one share
      return;
    }
    // A clock that went back leaves the interval running until it passes
    // the interval's start again.
    if (now_ns < interval_start_ns_ || now_ns - interval_start_ns_ < interval_ns_) return;
    const double want = Want(now_ns);
    if (offered_ != 0) {
      // The offered bytes scaled to one interval: a stretched interval (no
      // call came for a while) measured a lower rate, not more bytes.
      const double elapsed_s = static_cast<double>(now_ns - interval_start_ns_) * 1e-9;
      const double per_interval = static_cast<double>(offered_) * interval_s_ / elapsed_s;
      probability_ = std::clamp(want / per_interval, 0.0, 1.0);
    }
    allowance_ = want + std::min(0.0, allowance_);
    offered_ = 0;
    interval_start_ns_ = now_ns;
  }

  uint64_t seed_;
  double target_rate_ = 0;  // host bytes per second
  double max_rate_ = 0;     // host bytes per second; 0 = no cap
  uint64_t interval_ns_ = 0;
  double interval_s_ = 0;
  bool started_ = false;
  uint64_t start_ns_ = 0;
  uint64_t interval_start_ns_ = 0;
  uint64_t offered_ = 0;
  uint64_t written_total_ = 0;
  uint64_t coins_ = 0;
  double probability_ = 1.0;  // bounded by allowance_ until a rate is measured
  double allowance_ = 0;      // bytes the current interval may still admit
};

// Admits a block only if loading it from the tier is faster than
// recomputing it: bytes / bandwidth + latency, times a margin, below
// FLOPs / GPU rate. Unknown rates or FLOPs admit: a block's FLOPs are 0
// when the runtime does not know its token count (block_tokens = 0).
class CostAdmission final : public AdmissionPolicy {
 public:
  explicit CostAdmission(const PolicyKnobs& k) : margin_(k.cost_margin) {}
  std::string_view Name() const override { return "cost"; }
  bool Admit(const BlockMeta& block, const TierState& tier) override {
    if (tier.read_bytes_per_s <= 0 || tier.gpu_flops_per_s <= 0 || !(block.flops > 0)) return true;
    const double load_s = double(block.bytes) / tier.read_bytes_per_s + tier.read_latency_s;
    return load_s * margin_ < block.flops / tier.gpu_flops_per_s;
  }

 private:
  double margin_;
};

constexpr std::array<std::string_view, 6> kAdmission = {"always",       "frequency", "marconi",
                                                        "write_budget", "cost",      "reuse"};
constexpr std::array<std::string_view, 5> kEviction = {"lru", "s3fifo", "flop_aware", "slru",
                                                       "reuse"};

}  // namespace

std::span<const std::string_view> PolicyAdmissionNames() { return kAdmission; }
std::span<const std::string_view> PolicyEvictionNames() { return kEviction; }

namespace internal {

Status CheckSketchAgingPeriod(const PolicyKnobs& k) {
  if (k.sketch_aging_period <= k.SketchAgingLimit()) return Status::Ok();
  const std::string limit = std::to_string(k.SketchAgingLimit());
  return Status::InvalidArgument("sketch_aging_period " + std::to_string(k.sketch_aging_period) +
                                 " is longer than " + limit +
                                 " (sketch_width x frequency_threshold / 4): counters would fill "
                                 "until blocks never seen pass; expected at most " +
                                 limit + ", or 0 for " + limit);
}

Status CheckReuseMinSamples(const PolicyKnobs& k) {
  if (k.reuse_min_samples != 0) return Status::Ok();
  return Status::InvalidArgument(
      "reuse_min_samples is 0; expected at least 1 (a class is judged once that many of its "
      "blocks have matured)");
}

Result<std::unique_ptr<AdmissionPolicy>> BuildAdmission(std::string_view name,
                                                        const PolicyKnobs& knobs, uint64_t seed,
                                                        SharedReuseModels* models) {
  if (name == "always") return std::unique_ptr<AdmissionPolicy>(new AlwaysAdmission());
  if (name == "frequency") {
    KVTIER_RETURN_IF_ERROR(CheckSketchAgingPeriod(knobs));
    return std::unique_ptr<AdmissionPolicy>(new FrequencyAdmission(knobs));
  }
  if (name == "marconi") return NewMarconiAdmission(knobs);
  if (name == "reuse") {
    KVTIER_RETURN_IF_ERROR(CheckReuseMinSamples(knobs));
    return NewReuseAdmission(knobs, models ? models->For(knobs) : nullptr);
  }
  if (name == "cost") return std::unique_ptr<AdmissionPolicy>(new CostAdmission(knobs));
  if (name == "write_budget") {
    if (knobs.write_budget_bytes_per_day == 0) {
      return Status::InvalidArgument("write_budget admission needs write_budget_bytes_per_day > 0");
    }
    return std::unique_ptr<AdmissionPolicy>(new WriteBudgetAdmission(knobs, seed));
  }
  return Status::InvalidArgument("unknown admission policy '" + std::string(name) + "'");
}

Result<AdmissionChain> BuildAdmissionChain(std::span<const std::string> names,
                                           const PolicyKnobs& knobs, uint64_t seed,
                                           SharedReuseModels* models) {
  AdmissionChain chain;
  for (const std::string& n : names) {
    auto p = BuildAdmission(n, knobs, seed, models);
    if (!p.ok()) return p.status();
    chain.Add(std::move(*p));
  }
  return chain;
}

}  // namespace internal

Result<std::unique_ptr<AdmissionPolicy>> CreateAdmissionPolicy(std::string_view name,
                                                               const PolicyKnobs& knobs,
                                                               uint64_t seed) {
  return internal::BuildAdmission(name, knobs, seed, nullptr);
}

Result<AdmissionChain> AdmissionChain::Create(std::span<const std::string> names,
                                              const PolicyKnobs& knobs, uint64_t seed) {
  return internal::BuildAdmissionChain(names, knobs, seed, nullptr);
}

void AdmissionChain::ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks,
                                    const RequestHints& hints, uint64_t now_ns) {
  for (auto& p : policies_) p->ObserveRequest(chain, full_blocks, hints, now_ns);
}

void AdmissionChain::ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens,
                                   uint64_t now_ns) {
  for (auto& p : policies_) p->ObserveFinish(chain, output_tokens, now_ns);
}

void AdmissionChain::Add(std::unique_ptr<AdmissionPolicy> p) {
  if (p->Rations()) {
    policies_.push_back(std::move(p));
    return;
  }
  // Before the first rationing policy: those stay last, in their order.
  auto first =
      std::find_if(policies_.begin(), policies_.end(), [](const auto& q) { return q->Rations(); });
  policies_.insert(first, std::move(p));
}

bool AdmissionChain::Admit(const BlockMeta& block, const TierState& tier) {
  // Every policy that does not ration is asked, even after a refusal, so a
  // stateful one sees the same stream whatever its position. A rationing one
  // counts what it is offered against its budget: it is asked only about
  // blocks every policy before it admits, the blocks that would be written.
  bool admit = true;
  for (auto& p : policies_) {
    if (p->Rations() && !admit) return false;
    admit = p->Admit(block, tier) && admit;
  }
  return admit;
}

void AdmissionChain::OnWritten(uint64_t bytes, uint64_t now_ns) {
  for (auto& p : policies_) p->OnWritten(bytes, now_ns);
}

uint64_t PolicyKnobs::SketchAgingLimit() const {
  const uint64_t width = std::max<uint32_t>(sketch_width, kMinSketchWidth);
  const uint64_t threshold = std::max<uint32_t>(frequency_threshold, 1);
  return width / 4 * threshold + width % 4 * threshold / 4;  // width x threshold / 4, no overflow
}

Status PolicyKnobs::Validate() const {
  if (frequency_threshold == 0) {
    return Status::InvalidArgument("frequency_threshold is 0; expected at least 1");
  }
  // 4 rows of 4-byte counters: the limit keeps a tier's sketch within 256 MiB.
  constexpr uint32_t kMaxSketchWidth = 1u << 24;
  if (sketch_width > kMaxSketchWidth) {
    return Status::InvalidArgument("sketch_width " + std::to_string(sketch_width) +
                                   " is too wide; expected at most " +
                                   std::to_string(kMaxSketchWidth) + " counters per row");
  }
  KVTIER_RETURN_IF_ERROR(internal::CheckReuseMinSamples(*this));
  if (!(write_amplification >= 1.0)) {
    return Status::InvalidArgument("write_amplification is below 1; expected >= 1");
  }
  if (!(cost_margin > 0)) return Status::InvalidArgument("cost_margin must be > 0");
  if (!(flop_alpha >= 0 && flop_alpha <= kMaxFlopAlpha)) {
    return Status::InvalidArgument("flop_alpha must be in [0, 1e12]");
  }
  if (write_interval_ms == 0 || write_interval_ms > kMaxWriteIntervalMs) {
    return Status::InvalidArgument("write_interval_ms is " + std::to_string(write_interval_ms) +
                                   "; expected 1 to " + std::to_string(kMaxWriteIntervalMs) +
                                   " (a day)");
  }
  if (alpha_tune_window == 0 || alpha_tune_window > kMaxAlphaTuneWindow) {
    return Status::InvalidArgument("alpha_tune_window is " + std::to_string(alpha_tune_window) +
                                   "; expected 1 to " + std::to_string(kMaxAlphaTuneWindow) +
                                   " requests");
  }
  if (!(marconi_probation >= 0 && marconi_probation <= 1)) {
    return Status::InvalidArgument("marconi_probation must be in [0, 1]");
  }
  if (!(s3fifo_small_fraction > 0 && s3fifo_small_fraction < 1)) {
    return Status::InvalidArgument("s3fifo_small_fraction must be in (0, 1)");
  }
  if (!(slru_protected_fraction > 0 && slru_protected_fraction <= 1)) {
    return Status::InvalidArgument("slru_protected_fraction must be in (0, 1]");
  }
  if (!(reuse_ratio >= 0) || !(reuse_spread >= 0)) {
    return Status::InvalidArgument("reuse_ratio and reuse_spread must be >= 0");
  }
  if (!(reuse_fill_share >= 0 && reuse_fill_share <= 1)) {
    return Status::InvalidArgument("reuse_fill_share must be in [0, 1]");
  }
  if (!(reuse_age_exponent > 0 && reuse_age_exponent <= 4)) {
    return Status::InvalidArgument("reuse_age_exponent must be in (0, 4]");
  }
  if (!(marconi_continue_threshold >= 0 && marconi_continue_threshold <= 1)) {
    return Status::InvalidArgument("marconi_continue_threshold must be in [0, 1]");
  }
  return Status::Ok();
}

Status PolicyKnobs::ValidateFor(std::span<const std::string> admission) const {
  KVTIER_RETURN_IF_ERROR(Validate());
  bool marconi = false;
  for (const std::string& a : admission) {
    if (a == "frequency") KVTIER_RETURN_IF_ERROR(internal::CheckSketchAgingPeriod(*this));
    marconi = marconi || a == "marconi";
  }
  if (marconi_checkpoints_only && !marconi) {
    return Status::InvalidArgument(
        "marconi_checkpoints_only is true but the admission list has no marconi: it would "
        "change nothing; expected marconi among the admission policies, or the knob false");
  }
  return Status::Ok();
}

}  // namespace kvtier
