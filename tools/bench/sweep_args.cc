#include "tools/bench/sweep_args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/names.h"
#include "tools/bench/sweep.h"

namespace kvtier::bench {
namespace {

// A whole string that is one finite number.
bool ParseFinite(std::string_view text, double* out) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    return false;
  }
  *out = v;
  return true;
}

Status OutOfRange(std::string_view flag, double v, std::string_view expected) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return Status::InvalidArgument(std::string(flag) + " is " + text + "; expected " +
                                 std::string(expected));
}

// The policy names of a set are ones the product builds; `set` names it.
Status KnownPolicies(const SweepPolicy& p, const std::string& set) {
  if (p.oracle) return Status::Ok();
  for (const std::string* e : {&p.host_eviction, &p.nvme_eviction}) {
    if (!internal::ContainsName(PolicyEvictionNames(), *e)) {
      return Status::InvalidArgument(
          "--policies " + set + ": unknown eviction policy '" + *e +
          "'; expected one of: " + internal::JoinNames(PolicyEvictionNames()));
    }
  }
  for (const std::string& a : p.nvme_admission) {
    if (!internal::ContainsName(PolicyAdmissionNames(), a)) {
      return Status::InvalidArgument(
          "--policies " + set + ": unknown admission policy '" + a +
          "'; expected one of: " + internal::JoinNames(PolicyAdmissionNames()));
    }
  }
  return Status::Ok();
}

// A whole number in [0, max] (written as a number, "1e5" included).
bool IsWhole(double v, double max) { return v >= 0 && v <= max && v == std::floor(v); }

// The write_budget admission needs a budget, from exactly one of the two
// flags; the share is of the lru row's NVMe writes, so lru must be listed.
// Policy names that do not resolve are left to the row that builds them.
Status CheckWriteBudgetFlags(const SweepFlags& f) {
  const bool gib = f.write_budget_gib_per_day > 0, share = f.write_budget_lru_share > 0;
  if (gib && share) {
    return Status::InvalidArgument(
        "--write-budget-gib-per-day and --write-budget-lru-share both set the write_budget "
        "admission's budget; expected one of them");
  }
  const auto listed = [&](std::string_view name) {
    return std::find(f.policies.begin(), f.policies.end(), name) != f.policies.end();
  };
  if (share && !listed("lru")) {
    return Status::InvalidArgument(
        "--write-budget-lru-share is a share of the lru row's NVMe writes; expected lru in "
        "--policies");
  }
  if (gib || share) return Status::Ok();
  for (const std::string& name : f.policies) {
    Result<SweepPolicy> p = name == "custom" ? CustomSweepPolicy(f.custom) : NamedSweepPolicy(name);
    if (!p.ok()) continue;
    const std::vector<std::string>& adm = p->nvme_admission;
    if (std::find(adm.begin(), adm.end(), "write_budget") == adm.end()) continue;
    const std::string set = name == "custom" ? "custom (--custom " + f.custom + ")" : name;
    return Status::InvalidArgument(
        "--policies " + set +
        " admits with write_budget, which needs a budget; expected --write-budget-gib-per-day "
        "GIB or --write-budget-lru-share SHARE (with lru in --policies)");
  }
  return Status::Ok();
}

}  // namespace

Result<SweepPoint> ParseSweepPoint(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("--points: bad point '" + std::string(text) +
                                   "': " + std::string(why) +
                                   "; expected host:nvme fractions of the trace's unique blocks "
                                   "like 0.05:0.30, host in (0, 1], nvme in [0, 1]");
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return bad("no ':'");
  SweepPoint p;
  if (!ParseFinite(text.substr(0, colon), &p.host) ||
      !ParseFinite(text.substr(colon + 1), &p.nvme)) {
    return bad("not two finite numbers");
  }
  if (!(p.host > 0 && p.host <= 1 && p.nvme >= 0 && p.nvme <= 1)) return bad("out of range");
  return p;
}

uint64_t BlocksAt(double fraction, uint64_t unique) {
  const double blocks = fraction * double(unique);
  return static_cast<uint64_t>(std::floor(blocks + 1e-9 * std::max(1.0, blocks)));
}

Status ApplySweepKnob(std::string_view spec, PolicyKnobs* k) {
  const size_t eq = spec.find('=');
  double v = 0;
  if (eq == std::string_view::npos || !ParseFinite(spec.substr(eq + 1), &v)) {
    return Status::InvalidArgument("--knob '" + std::string(spec) +
                                   "': expected NAME=NUMBER with one finite number");
  }
  const std::string_view name = spec.substr(0, eq);
  if (name == "reuse_min_samples" || name == "reuse_half_life") {
    const double max = name == "reuse_min_samples"
                           ? double(std::numeric_limits<uint32_t>::max())
                           : 0x1p53;  // every whole double up to here is exact
    if (!IsWhole(v, max)) {
      return Status::InvalidArgument("--knob '" + std::string(spec) +
                                     "': expected a whole number from 0 to " +
                                     std::to_string(uint64_t(max)));
    }
    if (name == "reuse_min_samples") {
      k->reuse_min_samples = static_cast<uint32_t>(v);
    } else {
      k->reuse_half_life = static_cast<uint64_t>(v);
    }
    return Status::Ok();
  }
  double* field = name == "marconi_probation"         ? &k->marconi_probation
                  : name == "reuse_ratio"             ? &k->reuse_ratio
                  : name == "reuse_spread"            ? &k->reuse_spread
                  : name == "reuse_fill_share"        ? &k->reuse_fill_share
                  : name == "reuse_age_exponent"      ? &k->reuse_age_exponent
                  : name == "slru_protected_fraction" ? &k->slru_protected_fraction
                  : name == "s3fifo_small_fraction"   ? &k->s3fifo_small_fraction
                  : name == "flop_alpha"              ? &k->flop_alpha
                  : name == "cost_margin"             ? &k->cost_margin
                                                      : nullptr;
  if (field == nullptr) {
    return Status::InvalidArgument("--knob: unknown knob '" + std::string(name) + "'");
  }
  *field = v;
  return Status::Ok();
}

Result<PolicyKnobs> SweepKnobs(const SweepFlags& f) {
  PolicyKnobs knobs;
  if (!(f.write_budget_gib_per_day >= 0 && f.write_budget_gib_per_day <= 1e9)) {
    return OutOfRange("--write-budget-gib-per-day", f.write_budget_gib_per_day, "0 to 1e9");
  }
  knobs.write_budget_bytes_per_day =
      static_cast<uint64_t>(f.write_budget_gib_per_day * 1024.0 * 1024.0 * 1024.0);
  if (f.write_budget_gib_per_day > 0 && knobs.write_budget_bytes_per_day == 0) {
    return OutOfRange("--write-budget-gib-per-day", f.write_budget_gib_per_day,
                      "at least one byte per day (9.32e-10 GiB)");
  }
  if (f.probation) {
    if (!(*f.probation >= 0 && *f.probation <= 1)) {
      return OutOfRange("--probation", *f.probation, "0 to 1");
    }
    knobs.marconi_probation = *f.probation;
  }
  for (const std::string& spec : f.knobs) KVTIER_RETURN_IF_ERROR(ApplySweepKnob(spec, &knobs));
  if (!(knobs.marconi_probation >= 0 && knobs.marconi_probation <= 1)) {
    return OutOfRange("marconi_probation", knobs.marconi_probation, "0 to 1");
  }
  if (Status s = knobs.Validate(); !s.ok()) {
    return Status::InvalidArgument("--knob: " + std::string(s.message()));
  }
  return knobs;
}

Status ValidateSweepFlags(const SweepFlags& f) {
  if (f.gpu_pool_blocks == 0) return OutOfRange("--gpu-pool-blocks", 0, "at least 1");
  // Beyond these the modeled times leave what a clock in nanoseconds holds.
  if (!(f.gpu_tflops >= 1e-3 && f.gpu_tflops <= 1e6)) {
    return OutOfRange("--gpu-tflops", f.gpu_tflops, "0.001 to 1e6");
  }
  if (!(f.decode_ms >= 0 && f.decode_ms <= 1e6)) {
    return OutOfRange("--decode-ms", f.decode_ms, "0 to 1e6");
  }
  if (!(f.watermark >= 0 && f.watermark < 1)) {
    return OutOfRange("--watermark", f.watermark, "a fraction in [0, 1); 0 = off");
  }
  if (!(f.write_budget_lru_share >= 0 && std::isfinite(f.write_budget_lru_share))) {
    return OutOfRange("--write-budget-lru-share", f.write_budget_lru_share, "a finite number >= 0");
  }
  // At least one byte per token: less is cut to 0 bytes per block.
  if (!(f.hybrid_kv_kib_per_token >= 1.0 / 1024 && f.hybrid_kv_kib_per_token <= 0x1p20)) {
    return OutOfRange("--hybrid-kv-kib-per-token", f.hybrid_kv_kib_per_token,
                      "1/1024 (a byte) to 1048576");
  }
  if (!(f.hybrid_state_mib > 0 && f.hybrid_state_mib <= 0x1p20)) {
    return OutOfRange("--hybrid-state-mib", f.hybrid_state_mib, "(0, 1048576]");
  }
  if (!f.hybrid && (f.hybrid_kv_kib_per_token != SweepFlags{}.hybrid_kv_kib_per_token ||
                    f.hybrid_state_mib != SweepFlags{}.hybrid_state_mib)) {
    return Status::InvalidArgument(
        "--hybrid-kv-kib-per-token and --hybrid-state-mib describe the model of the hybrid "
        "table; expected --hybrid");
  }
  if (f.points.empty()) return Status::InvalidArgument("--points: no capacity point");
  for (const std::string& point : f.points) {
    KVTIER_RETURN_IF_ERROR(ParseSweepPoint(point).status());
  }
  // A set given that no row uses was meant for a row: told, not ignored.
  if (f.custom != SweepFlags{}.custom &&
      std::find(f.policies.begin(), f.policies.end(), "custom") == f.policies.end()) {
    return Status::InvalidArgument("--custom " + f.custom +
                                   " sets the 'custom' row's policies; expected custom in "
                                   "--policies");
  }
  // Every row's policies resolve before the first row runs (a long one).
  if (f.policies.empty()) return Status::InvalidArgument("--policies: no policy set");
  bool marconi = false, write_budget = false;
  for (const std::string& name : f.policies) {
    Result<SweepPolicy> p = name == "custom" ? CustomSweepPolicy(f.custom) : NamedSweepPolicy(name);
    if (!p.ok()) return Status::InvalidArgument("--policies: " + std::string(p.status().message()));
    KVTIER_RETURN_IF_ERROR(KnownPolicies(*p, name == "custom" ? f.custom : name));
    for (const std::string& a : p->nvme_admission) {
      marconi |= a == "marconi";
      write_budget |= a == "write_budget";
    }
  }
  if (f.probation && !marconi) {
    return Status::InvalidArgument(
        "--probation sets the marconi admission's probation; expected a policy set that admits "
        "with marconi in --policies");
  }
  if (!write_budget && (f.write_budget_gib_per_day != 0 || f.write_budget_lru_share != 0)) {
    return Status::InvalidArgument(
        "--write-budget-gib-per-day and --write-budget-lru-share set the write_budget "
        "admission's budget; expected a policy set that admits with write_budget in --policies");
  }
  // The knobs first: a budget out of range is told so, not taken for none.
  KVTIER_RETURN_IF_ERROR(SweepKnobs(f).status());
  return CheckWriteBudgetFlags(f);
}

}  // namespace kvtier::bench
