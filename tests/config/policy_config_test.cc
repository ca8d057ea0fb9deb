// The policy keys of the YAML config: every knob of config/examples/
// policies.yaml lands in the options exactly, overrides reach them, and the
// names the runtime accepts are the policy library's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/policy.h"
#include "tests/config/config_error.h"

namespace kvtier {
namespace {

std::string Example(const std::string& name) {
  return std::string(KVTIER_SOURCE_DIR) + "/config/examples/" + name;
}

TEST(PolicyConfigTest, PoliciesYamlSetsEveryKnob) {
  Result<KvtierConfig> r = LoadConfigFile(Example("policies.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const RuntimeOptions& rt = r->runtime;
  EXPECT_EQ(rt.gpu_flops_per_s, 4e14);
  ASSERT_EQ(rt.tiers.size(), 2u);
  const TierOptions& hub = rt.tiers[0];
  EXPECT_EQ(hub.eviction, "flop_aware");
  EXPECT_EQ(hub.admission, std::vector<std::string>{"always"});
  EXPECT_EQ(hub.policy.flop_alpha, 1.0);

  const TierOptions& ssd = rt.tiers[1];
  EXPECT_EQ(ssd.eviction, "s3fifo");
  EXPECT_EQ(ssd.admission, (std::vector<std::string>{"frequency", "write_budget", "cost"}));
  const PolicyKnobs& k = ssd.policy;
  EXPECT_EQ(k.frequency_threshold, 2u);
  EXPECT_EQ(k.sketch_width, 65536u);
  EXPECT_EQ(k.sketch_aging_period, 32768u);
  EXPECT_EQ(k.write_budget_bytes_per_day, 200 * kGiB);
  EXPECT_EQ(k.write_amplification, 1.2);
  EXPECT_EQ(k.write_max_bytes_per_s, 512 * kMiB);
  EXPECT_EQ(k.write_interval_ms, 1000u);
  EXPECT_EQ(k.cost_margin, 1.0);
  EXPECT_EQ(k.s3fifo_small_fraction, 0.1);
  EXPECT_EQ(ssd.read_bytes_per_s, 2e9);
  EXPECT_DOUBLE_EQ(ssd.read_latency_s, 100e-6);
  // Untouched knobs keep their defaults.
  EXPECT_EQ(k.marconi_admit_tails, PolicyKnobs{}.marconi_admit_tails);
  EXPECT_EQ(k.flop_alpha, PolicyKnobs{}.flop_alpha);
}

TEST(PolicyConfigTest, ModelCostComesFromTheModel) {
  Result<KvtierConfig> r = LoadConfigFile(Example("policies.yaml"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelCost& c = r->runtime.model_cost;
  EXPECT_EQ(c.layers, 4u);                // preset tiny
  EXPECT_EQ(c.hidden, 4096u);             // hidden_size in the file
  EXPECT_EQ(c.kv_bytes_per_token, 512u);  // 256 KiB blocks of 512 tokens
  EXPECT_EQ(r->runtime.block_tokens, 512u);

  // Without hidden_size: kv_heads * head_size * 8.
  Result<KvtierConfig> d =
      ParseConfig("model: {preset: tiny}\ntiers: [{name: h, type: host, capacity: 1GiB}]\n", "d");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->runtime.model_cost.hidden, 2u * 16u * 8u);
  EXPECT_EQ(d->runtime.gpu_flops_per_s, 0.0);
}

// kv_heads * head_size * 8 is computed in 64 bits: 2^32 used to wrap to a
// hidden width of 0, refused as "model_cost has 0 layers or 0 hidden".
TEST(PolicyConfigTest, DefaultHiddenSizeThatOverflows32BitsIsRefusedAtTheModel) {
  const auto yaml = [](const std::string& model) {
    return "model: {layers: 1, block_tokens: 1, dtype: fp8, " + model +
           "}\nengine: {pool_blocks: 1}\ntiers: [{name: host, type: host, capacity: 2GiB}]\n";
  };
  EXPECT_EQ(ErrorOf(yaml("kv_heads: 32768, head_size: 16384")),
            "t.yaml:1:59: model.hidden_size 0 stands for kv_heads * head_size * 8 = 4294967296, "
            "more than 4294967295; expected an explicit model.hidden_size from 1 to 4294967295, "
            "or kv_heads * head_size of at most 536870911");
  Result<KvtierConfig> r = ParseConfig(yaml("kv_heads: 32768, head_size: 16384"), "t.yaml",
                                       std::vector<std::string>{"model.hidden_size=8192"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.model_cost.hidden, 8192u);
  r = ParseConfig(yaml("kv_heads: 32767, head_size: 16384"), "t.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.model_cost.hidden, 32767u * 16384u * 8u);  // 2^32 - 131072
  // An override of either factor is named.
  r = ParseConfig(yaml("kv_heads: 32767, head_size: 16384"), "t.yaml",
                  std::vector<std::string>{"model.kv_heads=32768"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("--set model.kv_heads=32768: model.hidden_size 0 stands", 0),
            0u)
      << r.status().message();
}

TEST(PolicyConfigTest, OverridesReachTheKnobs) {
  const std::vector<std::string> sets = {"tiers.ssd.policy.frequency_threshold=5",
                                         "tiers.ssd.policy.write_budget_per_day=1TiB",
                                         "tiers.host.policy.flop_alpha=2.5",
                                         "tiers.ssd.admission=[frequency, marconi]",
                                         "tiers.ssd.eviction=flop_aware",
                                         "runtime.gpu_flops=1e15",
                                         "tiers.ssd.policy.slru_protected_fraction=0.5",
                                         "tiers.ssd.policy.reuse_ratio=1.5",
                                         "tiers.ssd.policy.reuse_spread=0.25",
                                         "tiers.ssd.policy.reuse_fill_share=0.4",
                                         "tiers.ssd.policy.reuse_min_samples=8",
                                         "tiers.ssd.policy.reuse_half_life=4096",
                                         "tiers.ssd.policy.reuse_age_exponent=0.75",
                                         "tiers.ssd.policy.marconi_admit_tails=false",
                                         "tiers.ssd.policy.marconi_continue_threshold=0.75",
                                         "tiers.ssd.policy.marconi_probation=0.5",
                                         "tiers.ssd.policy.marconi_checkpoints_only=true"};
  Result<KvtierConfig> r = LoadConfigFile(Example("policies.yaml"), sets);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime.tiers[1].policy.frequency_threshold, 5u);
  EXPECT_EQ(r->runtime.tiers[1].policy.write_budget_bytes_per_day, kTiB);
  EXPECT_EQ(r->runtime.tiers[0].policy.flop_alpha, 2.5);
  EXPECT_EQ(r->runtime.tiers[1].admission, (std::vector<std::string>{"frequency", "marconi"}));
  EXPECT_EQ(r->runtime.tiers[1].eviction, "flop_aware");
  EXPECT_EQ(r->runtime.gpu_flops_per_s, 1e15);
  const PolicyKnobs& k = r->runtime.tiers[1].policy;
  EXPECT_EQ(k.slru_protected_fraction, 0.5);
  EXPECT_EQ(k.reuse_ratio, 1.5);
  EXPECT_EQ(k.reuse_spread, 0.25);
  EXPECT_EQ(k.reuse_fill_share, 0.4);
  EXPECT_EQ(k.reuse_min_samples, 8u);
  EXPECT_EQ(k.reuse_half_life, 4096u);
  EXPECT_EQ(k.reuse_age_exponent, 0.75);
  EXPECT_FALSE(k.marconi_admit_tails);
  EXPECT_EQ(k.marconi_continue_threshold, 0.75f);
  EXPECT_EQ(k.marconi_probation, 0.5);
  EXPECT_TRUE(k.marconi_checkpoints_only);

  Result<KvtierConfig> bad = LoadConfigFile(
      Example("policies.yaml"), std::vector<std::string>{"tiers.ssd.policy.cost_margin=-1"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--set tiers.ssd.policy.cost_margin=-1: tiers.ssd.policy.cost_margin -1 is out of "
            "range; expected a number > 0, at most 1e12");
  // A budget of 0 set by a --set is blamed on that --set, not on the file's
  // admission list.
  bad = LoadConfigFile(Example("policies.yaml"),
                       std::vector<std::string>{"tiers.ssd.policy.write_budget_per_day=0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("--set tiers.ssd.policy.write_budget_per_day=0: ", 0), 0u)
      << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("write_budget_per_day is 0"), std::string_view::npos)
      << bad.status().ToString();
  // A value past the top of the range is told the top (it said ">= 0" of 1e30).
  bad = LoadConfigFile(Example("policies.yaml"),
                       std::vector<std::string>{"tiers.ssd.policy.flop_alpha=1e30"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("flop_alpha 1e30 is out of range; expected a number from "
                                        "0 to 1e12"),
            std::string_view::npos)
      << bad.status().ToString();
  bad = LoadConfigFile(Example("policies.yaml"),
                       std::vector<std::string>{"tiers.ssd.policy.reuse_age_exponent=0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--set tiers.ssd.policy.reuse_age_exponent=0: tiers.ssd.policy.reuse_age_exponent 0 "
            "is out of range; expected a number in (0, 4]");
  // The runtime keeps the window's chains: the cap bounds that memory.
  bad = LoadConfigFile(Example("policies.yaml"),
                       std::vector<std::string>{"tiers.ssd.policy.alpha_tune_window=65537"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--set tiers.ssd.policy.alpha_tune_window=65537: tiers.ssd.policy.alpha_tune_window "
            "is 65537, out of range; expected a whole number from 1 to 65536");
}

TEST(PolicyConfigTest, EveryPolicyOfTheLibraryIsAccepted) {
  const auto eviction = EvictionPolicyNames();
  const auto admission = AdmissionPolicyNames();
  ASSERT_EQ(eviction.size(), PolicyEvictionNames().size());
  ASSERT_EQ(admission.size(), PolicyAdmissionNames().size());
  for (std::string_view name : PolicyEvictionNames()) {
    Result<KvtierConfig> r =
        LoadConfigFile(Example("policies.yaml"),
                       std::vector<std::string>{"tiers.ssd.eviction=" + std::string(name)});
    EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
  }
  for (std::string_view name : PolicyAdmissionNames()) {
    Result<KvtierConfig> r =
        LoadConfigFile(Example("policies.yaml"),
                       std::vector<std::string>{"tiers.ssd.admission=[" + std::string(name) + "]"});
    EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
  }
}

// The aging period's limit depends on four values; the error points at the
// one an override changed, else at the period in the file.
TEST(PolicyConfigTest, SketchAgingLimitBlamesTheOverrideThatBrokeIt) {
  const std::string tail =
      " is longer than 16384 (sketch_width x frequency_threshold / 4) for frequency admission: "
      "counters would fill until blocks never seen pass; expected at most 16384, or 0 for 16384";
  Result<KvtierConfig> r = LoadConfigFile(
      Example("policies.yaml"), std::vector<std::string>{"tiers.ssd.policy.frequency_threshold=1"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--set tiers.ssd.policy.frequency_threshold=1: tiers.ssd.policy.sketch_aging_period "
            "32768" +
                tail);
  r = LoadConfigFile(Example("policies.yaml"),
                     std::vector<std::string>{"tiers.ssd.policy.sketch_width=32768"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("--set tiers.ssd.policy.sketch_width=32768: ", 0), 0u)
      << r.status().message();

  const std::string yaml =
      "tiers: [{name: h, type: host, capacity: 1GiB, admission: [always],\n"
      "         policy: {frequency_threshold: 1, sketch_aging_period: 20000}}]\n";
  r = ParseConfig(yaml, "t", std::vector<std::string>{"tiers.h.admission=[frequency]"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--set tiers.h.admission=[frequency]: tiers.h.policy.sketch_aging_period 20000" + tail);
  // No override: the period in the file.
  r = ParseConfig(yaml, "t", std::vector<std::string>{"tiers.h.admission=[always]"});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  r = ParseConfig(
      "tiers: [{name: h, type: host, capacity: 1GiB, admission: [frequency],\n"
      "         policy: {sketch_width: 65536, frequency_threshold: 1,\n"
      "                  sketch_aging_period: 20000}}]\n",
      "t");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "t:3:40: tiers.h.policy.sketch_aging_period 20000" + tail);
}

// marconi_checkpoints_only without marconi admission would keep every
// checkpoint while reading as if they were judged: an override that drops
// marconi is the line blamed.
TEST(PolicyConfigTest, CheckpointsOnlyNeedsMarconiAdmission) {
  ASSERT_TRUE(LoadConfigFile(Example("hybrid.yaml")).ok());
  Result<KvtierConfig> r = LoadConfigFile(
      Example("hybrid.yaml"), std::vector<std::string>{"tiers.host.admission=[always]"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "--set tiers.host.admission=[always]: tiers.host.policy.marconi_checkpoints_only is "
            "true but tiers.host.admission has no marconi, so it would change nothing; expected "
            "marconi in the admission list, such as 'admission: [marconi]', or the knob false");
  EXPECT_TRUE(
      LoadConfigFile(Example("hybrid.yaml"),
                     std::vector<std::string>{"tiers.host.admission=[always]",
                                              "tiers.host.policy.marconi_checkpoints_only=false"})
          .ok());
  // Without an admission list the message names the default it stands for.
  r = ParseConfig(
      "runtime: {state_blocks: 2}\n"
      "tiers: [{name: h, type: host, capacity: 1GiB, policy: {marconi_checkpoints_only: true}}]\n",
      "t");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "t:2:82: tiers.h.policy.marconi_checkpoints_only is true but tiers.h.admission "
            "(default [always]) has no marconi, so it would change nothing; expected marconi in "
            "the admission list, such as 'admission: [marconi]', or the knob false");
}

TEST(PolicyConfigTest, TierOptionsValidateThePolicyFields) {
  TierOptions t;
  t.name = "ssd";
  t.type = "host";
  t.capacity_bytes = kGiB;
  EXPECT_EQ(t.eviction, std::string(kDefaultEvictionPolicy));
  EXPECT_EQ(t.admission, std::vector<std::string>{std::string(kDefaultAdmissionPolicy)});
  EXPECT_TRUE(t.Validate().ok());
  t.admission = {"frequency", "write_budget"};
  EXPECT_EQ(t.Validate().message(),
            "tier 'ssd': admission write_budget has no budget; expected "
            "policy.write_budget_bytes_per_day > 0");
  t.policy.write_budget_bytes_per_day = kGiB;
  EXPECT_TRUE(t.Validate().ok());
  t.policy.marconi_checkpoints_only = true;
  EXPECT_EQ(t.Validate().message(),
            "tier 'ssd': policy marconi_checkpoints_only is true but the admission list has no "
            "marconi: it would change nothing; expected marconi among the admission policies, "
            "or the knob false");
  t.admission.push_back("marconi");
  EXPECT_TRUE(t.Validate().ok());
  t.policy.marconi_checkpoints_only = false;
  t.policy.frequency_threshold = 0;
  EXPECT_EQ(t.Validate().message(),
            "tier 'ssd': policy frequency_threshold is 0; expected at least 1");
  t.policy.frequency_threshold = 2;
  t.read_latency_s = -1;
  EXPECT_EQ(t.Validate().message(),
            "tier 'ssd': negative read bandwidth or latency; expected values >= 0");
}

}  // namespace
}  // namespace kvtier
