// kvtier-bench sweep's flags: points, knobs and engine numbers are finite and
// in range, or the sweep stops with a message naming the flag.
#include "tools/bench/sweep_args.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvtier::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(SweepArgs, PointsAreTwoFiniteFractions) {
  Result<SweepPoint> p = ParseSweepPoint("0.05:0.30");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(p->host, 0.05);
  EXPECT_DOUBLE_EQ(p->nvme, 0.30);
  EXPECT_TRUE(ParseSweepPoint("1:0").ok());
  for (const char* bad : {"nan:0", "0.1:nan", "inf:0", "1e30:0", "0.1:1e30", "0:0.5", "-0.1:0.5",
                          "0.1:-0.5", "0.1", "0.1:0.2x", "0.1:", ":0.2", "0.1 :0.2", "", "a:b"}) {
    Result<SweepPoint> r = ParseSweepPoint(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind(std::string("--points: bad point '") + bad + "'", 0), 0u)
        << r.status().message();
  }
  EXPECT_EQ(ParseSweepPoint("1e30:0").status().message(),
            "--points: bad point '1e30:0': out of range; expected host:nvme fractions of the "
            "trace's unique blocks like 0.05:0.30, host in (0, 1], nvme in [0, 1]");
}

TEST(SweepArgs, CapacityPointsCountWholeBlocks) {
  EXPECT_EQ(BlocksAt(0.29, 100), 29u);  // 28.999999999999996 in doubles
  EXPECT_EQ(BlocksAt(0.57, 100), 57u);
  EXPECT_EQ(BlocksAt(0.58, 100), 58u);
  EXPECT_EQ(BlocksAt(0.05, 12207), 610u);  // 610.35: rounded down
  EXPECT_EQ(BlocksAt(0.5, 43924), 21962u);
  EXPECT_EQ(BlocksAt(1.0, 7), 7u);
  EXPECT_EQ(BlocksAt(0.0, 7), 0u);
}

TEST(SweepArgs, KnobsTakeOneFiniteNumberInRange) {
  PolicyKnobs k;
  ASSERT_TRUE(ApplySweepKnob("reuse_ratio=1.2", &k).ok());
  EXPECT_DOUBLE_EQ(k.reuse_ratio, 1.2);
  ASSERT_TRUE(ApplySweepKnob("reuse_min_samples=1e3", &k).ok());
  EXPECT_EQ(k.reuse_min_samples, 1000u);
  ASSERT_TRUE(ApplySweepKnob("reuse_half_life=4096", &k).ok());
  EXPECT_EQ(k.reuse_half_life, 4096u);

  const PolicyKnobs before = k;
  for (const char* bad :
       {"reuse_ratio=1.2junk", "reuse_ratio=", "reuse_ratio", "reuse_ratio=nan", "flop_alpha=inf",
        "reuse_min_samples=-1", "reuse_min_samples=1.5", "reuse_min_samples=4294967296",
        "reuse_half_life=-1", "reuse_half_life=1e300", "no_such_knob=1"}) {
    Status s = ApplySweepKnob(bad, &k);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--knob"), std::string_view::npos) << s.message();
  }
  EXPECT_EQ(k.reuse_min_samples, before.reuse_min_samples);
  EXPECT_EQ(k.reuse_half_life, before.reuse_half_life);
  EXPECT_DOUBLE_EQ(k.reuse_ratio, before.reuse_ratio);
  EXPECT_EQ(ApplySweepKnob("reuse_ratio=1.2junk", &k).message(),
            "--knob 'reuse_ratio=1.2junk': expected NAME=NUMBER with one finite number");
  EXPECT_EQ(ApplySweepKnob("reuse_min_samples=-1", &k).message(),
            "--knob 'reuse_min_samples=-1': expected a whole number from 0 to 4294967295");

  // Ranges of the knobs themselves come from PolicyKnobs::Validate.
  SweepFlags f;
  f.knobs = {"s3fifo_small_fraction=1.5"};
  EXPECT_EQ(SweepKnobs(f).status().message(), "--knob: s3fifo_small_fraction must be in (0, 1)");
  f.knobs = {"marconi_probation=2"};
  EXPECT_EQ(SweepKnobs(f).status().code(), StatusCode::kInvalidArgument);
  f.knobs = {};
  f.write_budget_gib_per_day = 2;
  Result<PolicyKnobs> knobs = SweepKnobs(f);
  ASSERT_TRUE(knobs.ok()) << knobs.status().ToString();
  EXPECT_EQ(knobs->write_budget_bytes_per_day, 2ull << 30);
}

TEST(SweepArgs, EngineFlagsAreFiniteAndInRange) {
  EXPECT_TRUE(ValidateSweepFlags(SweepFlags()).ok());
  const auto message = [](auto set) {
    SweepFlags f;
    set(f);
    Status s = ValidateSweepFlags(f);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_EQ(message([](SweepFlags& f) { f.gpu_tflops = 0; }),
            "--gpu-tflops is 0; expected a finite number > 0");
  EXPECT_EQ(message([](SweepFlags& f) { f.watermark = 1.5; }),
            "--watermark is 1.5; expected a fraction in [0, 1); 0 = off");
  EXPECT_EQ(message([](SweepFlags& f) { f.gpu_pool_blocks = 0; }),
            "--gpu-pool-blocks is 0; expected at least 1");
  message([](SweepFlags& f) { f.gpu_tflops = kNaN; });
  message([](SweepFlags& f) { f.gpu_tflops = kInf; });
  message([](SweepFlags& f) { f.decode_ms = -1; });
  message([](SweepFlags& f) { f.watermark = kNaN; });
  message([](SweepFlags& f) { f.write_budget_gib_per_day = kNaN; });
  message([](SweepFlags& f) { f.write_budget_gib_per_day = 1e30; });
  message([](SweepFlags& f) { f.write_budget_lru_share = kInf; });
  message([](SweepFlags& f) { f.probation = kNaN; });
  message([](SweepFlags& f) { f.hybrid_state_mib = 0; });
  message([](SweepFlags& f) { f.hybrid_kv_kib_per_token = kNaN; });
  const std::string nan_point = message([](SweepFlags& f) { f.points = {"0.05:0.30", "nan:0"}; });
  EXPECT_EQ(nan_point.rfind("--points: bad point 'nan:0'", 0), 0u) << nan_point;
  message([](SweepFlags& f) { f.points = {}; });
  message([](SweepFlags& f) { f.knobs = {"reuse_min_samples=-1"}; });
}

}  // namespace
}  // namespace kvtier::bench
