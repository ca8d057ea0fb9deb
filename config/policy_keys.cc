// The `policy:` map of a tier: the knobs of its admission and eviction
// policies (TierOptions::policy, read_bytes_per_s, read_latency_s). See
// config/examples/policies.yaml for every key with its meaning.
#include "config/policy_keys.h"

#include <array>
#include <string>

#include "config/config_values.h"

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 25> kPolicyKeys = {"frequency_threshold",
                                                          "sketch_width",
                                                          "sketch_aging_period",
                                                          "marconi_admit_tails",
                                                          "marconi_continue_threshold",
                                                          "marconi_probation",
                                                          "marconi_checkpoints_only",
                                                          "write_budget_per_day",
                                                          "write_amplification",
                                                          "write_max_per_s",
                                                          "write_interval_ms",
                                                          "cost_margin",
                                                          "read_bandwidth",
                                                          "read_latency_us",
                                                          "flop_alpha",
                                                          "alpha_tune_every",
                                                          "alpha_tune_window",
                                                          "s3fifo_small_fraction",
                                                          "slru_protected_fraction",
                                                          "reuse_ratio",
                                                          "reuse_spread",
                                                          "reuse_fill_share",
                                                          "reuse_min_samples",
                                                          "reuse_half_life",
                                                          "reuse_age_exponent"};

// PolicyKnobs::Validate's limit: 4 rows of 2^24 counters are 256 MiB a tier.
constexpr uint64_t kMaxSketchWidth = uint64_t{1} << 24;

// A number within [min, max], or (min, max] when `min_open`.
struct Range {
  double min;
  bool min_open;
  double max;
  const char* expected;
};

Status ReadRanged(const ConfigNode& node, const std::string& path, const Range& r, double* out) {
  double v = 0;
  KVTIER_RETURN_IF_ERROR(ReadDouble(node, path, &v));
  const bool low_ok = r.min_open ? v > r.min : v >= r.min;
  if (!low_ok || !(v <= r.max)) {
    return NodeError(node.where, path + " " + node.text + " is out of range", r.expected);
  }
  *out = v;
  return Status::Ok();
}

Status ReadNumbers(const ConfigNode& node, const std::string& path, TierOptions* t) {
  struct DoubleKey {
    std::string_view key;
    Range range;
    double* out;
  };
  PolicyKnobs& k = t->policy;
  double cont = k.marconi_continue_threshold;
  double read_latency_us = t->read_latency_s * 1e6;
  const DoubleKey keys[] = {
      {"marconi_continue_threshold", {0, false, 1, "a number from 0 to 1"}, &cont},
      {"marconi_probation", {0, false, 1, "a number from 0 to 1"}, &k.marconi_probation},
      {"write_amplification", {1, false, 1e6, "a factor from 1 to 1e6"}, &k.write_amplification},
      {"cost_margin", {0, true, 1e12, "a number > 0, at most 1e12"}, &k.cost_margin},
      {"read_latency_us", {0, false, 1e12, "microseconds from 0 to 1e12"}, &read_latency_us},
      {"flop_alpha",
       {0, false, PolicyKnobs::kMaxFlopAlpha, "a number from 0 to 1e12"},
       &k.flop_alpha},
      {"s3fifo_small_fraction",
       {0, true, 0.999999, "a fraction in (0, 1)"},
       &k.s3fifo_small_fraction},
      {"slru_protected_fraction", {0, true, 1, "a fraction in (0, 1]"}, &k.slru_protected_fraction},
      {"reuse_ratio", {0, false, 1e12, "a number from 0 to 1e12"}, &k.reuse_ratio},
      {"reuse_spread", {0, false, 1e12, "a number from 0 to 1e12"}, &k.reuse_spread},
      {"reuse_fill_share", {0, false, 1, "a fraction from 0 to 1"}, &k.reuse_fill_share},
      {"reuse_age_exponent", {0, true, 4, "a number in (0, 4]"}, &k.reuse_age_exponent},
  };
  for (const DoubleKey& d : keys) {
    if (const ConfigNode* p = node.Find(std::string(d.key))) {
      KVTIER_RETURN_IF_ERROR(ReadRanged(*p, path + "." + std::string(d.key), d.range, d.out));
    }
  }
  k.marconi_continue_threshold = static_cast<float>(cont);
  t->read_latency_s = read_latency_us * 1e-6;
  return Status::Ok();
}

Status ReadSizes(const ConfigNode& node, const std::string& path, TierOptions* t) {
  PolicyKnobs& k = t->policy;
  if (const ConfigNode* p = node.Find("write_budget_per_day")) {
    KVTIER_RETURN_IF_ERROR(
        ReadByteSize(*p, path + ".write_budget_per_day", &k.write_budget_bytes_per_day));
  }
  if (const ConfigNode* p = node.Find("write_max_per_s")) {
    KVTIER_RETURN_IF_ERROR(ReadByteSize(*p, path + ".write_max_per_s", &k.write_max_bytes_per_s));
  }
  if (const ConfigNode* p = node.Find("read_bandwidth")) {
    uint64_t bytes_per_s = 0;
    KVTIER_RETURN_IF_ERROR(ReadByteSize(*p, path + ".read_bandwidth", &bytes_per_s));
    t->read_bytes_per_s = static_cast<double>(bytes_per_s);
  }
  return Status::Ok();
}

Status ReadCounts(const ConfigNode& node, const std::string& path, TierOptions* t) {
  PolicyKnobs& k = t->policy;
  if (const ConfigNode* p = node.Find("frequency_threshold")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".frequency_threshold", 1, &k.frequency_threshold));
  }
  if (const ConfigNode* p = node.Find("sketch_width")) {
    uint64_t width = 0;
    KVTIER_RETURN_IF_ERROR(ReadUint(*p, path + ".sketch_width", 16, kMaxSketchWidth, &width));
    k.sketch_width = static_cast<uint32_t>(width);
  }
  if (const ConfigNode* p = node.Find("sketch_aging_period")) {  // 0 = the width's limit
    KVTIER_RETURN_IF_ERROR(
        ReadUint(*p, path + ".sketch_aging_period", 0, uint64_t{1} << 62, &k.sketch_aging_period));
  }
  if (const ConfigNode* p = node.Find("reuse_min_samples")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".reuse_min_samples", 1, &k.reuse_min_samples));
  }
  if (const ConfigNode* p = node.Find("reuse_half_life")) {
    KVTIER_RETURN_IF_ERROR(
        ReadUint(*p, path + ".reuse_half_life", 0, uint64_t{1} << 62, &k.reuse_half_life));
  }
  if (const ConfigNode* p = node.Find("write_interval_ms")) {
    KVTIER_RETURN_IF_ERROR(ReadUint(*p, path + ".write_interval_ms", 1,
                                    PolicyKnobs::kMaxWriteIntervalMs, &k.write_interval_ms));
  }
  if (const ConfigNode* p = node.Find("alpha_tune_every")) {  // 0 = never
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".alpha_tune_every", 0, &k.alpha_tune_every));
  }
  if (const ConfigNode* p = node.Find("alpha_tune_window")) {
    uint64_t window = 0;
    KVTIER_RETURN_IF_ERROR(
        ReadUint(*p, path + ".alpha_tune_window", 1, PolicyKnobs::kMaxAlphaTuneWindow, &window));
    k.alpha_tune_window = static_cast<uint32_t>(window);
  }
  if (const ConfigNode* p = node.Find("marconi_admit_tails")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*p, path + ".marconi_admit_tails", &k.marconi_admit_tails));
  }
  if (const ConfigNode* p = node.Find("marconi_checkpoints_only")) {
    KVTIER_RETURN_IF_ERROR(
        ReadBool(*p, path + ".marconi_checkpoints_only", &k.marconi_checkpoints_only));
  }
  return Status::Ok();
}

}  // namespace

std::span<const std::string_view> PolicyKeys() { return kPolicyKeys; }

Status ReadPolicyKeys(const ConfigNode& tier, const std::string& tier_path, TierOptions* t) {
  const ConfigNode* node = tier.Find("policy");
  if (node == nullptr || node->kind == ConfigNode::Kind::kNull) return Status::Ok();
  const std::string path = tier_path + ".policy";
  KVTIER_RETURN_IF_ERROR(CheckMap(*node, path, kPolicyKeys));
  KVTIER_RETURN_IF_ERROR(ReadCounts(*node, path, t));
  KVTIER_RETURN_IF_ERROR(ReadSizes(*node, path, t));
  KVTIER_RETURN_IF_ERROR(ReadNumbers(*node, path, t));
  // A last net under the field checks above.
  Status s = t->policy.Validate();
  if (!s.ok()) {
    return Status::InvalidArgument(node->where + ": " + path + ": " + std::string(s.message()));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
