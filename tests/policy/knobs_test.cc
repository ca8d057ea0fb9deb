// PolicyKnobs ranges: a knob that would silently break its policy is refused
// by Validate, by the policy builders and by the config reader, each with
// the reason.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/policy.h"

namespace kvtier {
namespace {

const char kMinSamplesError[] =
    "reuse_min_samples is 0; expected at least 1 (a class is judged once that many of its "
    "blocks have matured)";

TEST(PolicyKnobsTest, ValidateRefusesKnobsThatBreakTheirPolicy) {
  struct Case {
    const char* what;
    std::function<void(PolicyKnobs&)> set;
    const char* error;  // "" = valid
  };
  const Case cases[] = {
      {"defaults", [](PolicyKnobs&) {}, ""},
      {"min samples 0", [](PolicyKnobs& k) { k.reuse_min_samples = 0; }, kMinSamplesError},
      {"min samples 1", [](PolicyKnobs& k) { k.reuse_min_samples = 1; }, ""},
      {"aging 0 = the limit", [](PolicyKnobs& k) { k.sketch_aging_period = 0; }, ""},
      {"aging at the limit", [](PolicyKnobs& k) { k.sketch_aging_period = 32768; }, ""},
      {"aging past the limit", [](PolicyKnobs& k) { k.sketch_aging_period = 32769; },
       "sketch_aging_period 32769 is longer than 32768 (sketch_width x frequency_threshold / "
       "4): counters would fill until blocks never seen pass; expected at most 32768, or 0 for "
       "32768"},
      {"the old default", [](PolicyKnobs& k) { k.sketch_aging_period = 1 << 20; },
       "sketch_aging_period 1048576 is longer than 32768 (sketch_width x frequency_threshold / "
       "4): counters would fill until blocks never seen pass; expected at most 32768, or 0 for "
       "32768"},
      {"a higher threshold allows longer",
       [](PolicyKnobs& k) {
         k.frequency_threshold = 8;
         k.sketch_aging_period = 131072;
       },
       ""},
      {"interval 0", [](PolicyKnobs& k) { k.write_interval_ms = 0; },
       "write_interval_ms is 0; expected 1 to 86400000 (a day)"},
      {"interval past a day", [](PolicyKnobs& k) { k.write_interval_ms = uint64_t{1} << 60; },
       "write_interval_ms is 1152921504606846976; expected 1 to 86400000 (a day)"},
      {"interval a day", [](PolicyKnobs& k) { k.write_interval_ms = 86400000; }, ""},
      {"window 0", [](PolicyKnobs& k) { k.alpha_tune_window = 0; },
       "alpha_tune_window is 0; expected 1 to 65536 requests"},
      {"window past the cap", [](PolicyKnobs& k) { k.alpha_tune_window = 65537; },
       "alpha_tune_window is 65537; expected 1 to 65536 requests"},
      {"window at the cap", [](PolicyKnobs& k) { k.alpha_tune_window = 65536; }, ""},
      {"probation NaN",
       [](PolicyKnobs& k) { k.marconi_probation = std::numeric_limits<double>::quiet_NaN(); },
       "marconi_probation must be in [0, 1]"},
      {"probation above 1", [](PolicyKnobs& k) { k.marconi_probation = 1.5; },
       "marconi_probation must be in [0, 1]"},
      {"alpha infinite",
       [](PolicyKnobs& k) { k.flop_alpha = std::numeric_limits<double>::infinity(); },
       "flop_alpha must be in [0, 1e12]"},
      {"a wider sketch allows longer",
       [](PolicyKnobs& k) {
         k.sketch_width = 1 << 22;
         k.sketch_aging_period = 1 << 21;
       },
       ""},
  };
  const std::vector<std::string> frequency = {"always", "frequency"};
  for (const Case& c : cases) {
    PolicyKnobs k;
    c.set(k);
    EXPECT_EQ(std::string(k.ValidateFor(frequency).message()), c.error) << c.what;
  }
}

// The aging limit binds only a tier that counts sightings: a period set
// for no frequency admission (the old example's 2^20) still loads.
TEST(PolicyKnobsTest, TheAgingLimitBindsOnlyFrequencyAdmission) {
  PolicyKnobs k;
  k.sketch_aging_period = 1 << 20;
  EXPECT_TRUE(k.Validate().ok());
  const std::vector<std::string> others = {"always", "write_budget", "reuse", "cost", "marconi"};
  EXPECT_TRUE(k.ValidateFor(others).ok());
  const std::vector<std::string> frequency = {"frequency"};
  EXPECT_FALSE(k.ValidateFor(frequency).ok());
}

TEST(PolicyKnobsTest, AgingPeriodFollowsTheWidth) {
  PolicyKnobs k;
  EXPECT_EQ(k.sketch_aging_period, 0u);
  EXPECT_EQ(k.SketchAgingPeriod(), 65536u * 2 / 4);
  k.sketch_width = 1 << 20;
  k.frequency_threshold = 3;
  EXPECT_EQ(k.SketchAgingPeriod(), (1u << 20) * 3 / 4);
  k.sketch_aging_period = 100;
  EXPECT_EQ(k.SketchAgingPeriod(), 100u);
  k.sketch_width = 0xFFFFFFFF;  // no overflow at the extremes
  k.frequency_threshold = 0xFFFFFFFF;
  EXPECT_EQ(k.SketchAgingLimit(), 0xFFFFFFFFULL / 4 * 0xFFFFFFFFULL + 3ULL * 0xFFFFFFFFULL / 4);
}

TEST(PolicyKnobsTest, BuildersRefuseWhatValidateRefuses) {
  PolicyKnobs k;
  k.reuse_min_samples = 0;
  EXPECT_EQ(CreateAdmissionPolicy("reuse", k).status().message(), kMinSamplesError);
  EXPECT_EQ(CreateEvictionPolicy("reuse", k).status().message(), kMinSamplesError);
  PolicyKnobs f;
  f.sketch_aging_period = 1 << 20;
  EXPECT_FALSE(CreateAdmissionPolicy("frequency", f).ok());
  EXPECT_TRUE(CreateAdmissionPolicy("frequency", PolicyKnobs{}).ok());
}

TEST(PolicyKnobsTest, ConfigRefusesZeroMinSamplesAndLongAging) {
  struct Case {
    const char* policy;
    const char* error;
  };
  const Case cases[] = {
      {"{reuse_min_samples: 0}",
       "t:1:75: tiers.h.policy.reuse_min_samples is 0, out of range; expected a whole number "
       "from 1 to 4294967295"},
      {"{sketch_aging_period: 1048576}", ""},  // no frequency admission: any period
      {"{sketch_aging_period: 1048576}, admission: [frequency]",
       "t:1:77: tiers.h.policy.sketch_aging_period 1048576 is longer than 32768 (sketch_width "
       "x frequency_threshold / 4) for frequency admission: counters would fill until blocks "
       "never seen pass; expected at most 32768, or 0 for 32768"},
      {"{reuse_min_samples: 1, sketch_aging_period: 0}", ""},
  };
  for (const Case& c : cases) {
    const std::string yaml =
        "tiers: [{name: h, type: host, capacity: 1GiB, policy: " + std::string(c.policy) + "}]\n";
    Result<KvtierConfig> r = ParseConfig(yaml, "t");
    EXPECT_EQ(r.ok() ? std::string() : std::string(r.status().message()), c.error) << c.policy;
  }
}

}  // namespace
}  // namespace kvtier
