// kvtier-bench sweep's flags: points, knobs and engine numbers are finite and
// in range, or the sweep stops with a message naming the flag.
#include "tools/bench/sweep_args.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "tools/bench/sweep.h"
#include "tools/bench/sweep_point.h"

namespace kvtier::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ValidateSweepFlags' refusal of the default flags as `set` changes them.
template <class Set>
std::string RefusalOf(Set set) {
  SweepFlags f;
  set(f);
  Status s = ValidateSweepFlags(f);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  return std::string(s.message());
}

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
  EXPECT_EQ(RefusalOf([](SweepFlags& f) { f.gpu_tflops = 0; }),
            "--gpu-tflops is 0; expected 0.001 to 1e6");
  // Far below, the modeled times left the clock's range (a TTFT of 3e62 s).
  EXPECT_EQ(RefusalOf([](SweepFlags& f) { f.gpu_tflops = 1e-300; }),
            "--gpu-tflops is 1e-300; expected 0.001 to 1e6");
  EXPECT_EQ(RefusalOf([](SweepFlags& f) { f.watermark = 1.5; }),
            "--watermark is 1.5; expected a fraction in [0, 1); 0 = off");
  EXPECT_EQ(RefusalOf([](SweepFlags& f) { f.gpu_pool_blocks = 0; }),
            "--gpu-pool-blocks is 0; expected at least 1");
  RefusalOf([](SweepFlags& f) { f.gpu_tflops = kNaN; });
  RefusalOf([](SweepFlags& f) { f.gpu_tflops = kInf; });
  RefusalOf([](SweepFlags& f) { f.decode_ms = -1; });
  RefusalOf([](SweepFlags& f) { f.watermark = kNaN; });
  RefusalOf([](SweepFlags& f) { f.write_budget_gib_per_day = kNaN; });
  RefusalOf([](SweepFlags& f) { f.write_budget_gib_per_day = 1e30; });
  RefusalOf([](SweepFlags& f) { f.write_budget_lru_share = kInf; });
  RefusalOf([](SweepFlags& f) { f.probation = kNaN; });
  RefusalOf([](SweepFlags& f) { f.hybrid_state_mib = 0; });
  RefusalOf([](SweepFlags& f) { f.hybrid_kv_kib_per_token = kNaN; });
  const std::string nan_point = RefusalOf([](SweepFlags& f) { f.points = {"0.05:0.30", "nan:0"}; });
  EXPECT_EQ(nan_point.rfind("--points: bad point 'nan:0'", 0), 0u) << nan_point;
  RefusalOf([](SweepFlags& f) { f.points = {}; });
  RefusalOf([](SweepFlags& f) { f.knobs = {"reuse_min_samples=-1"}; });
}

// Flags only a row not asked for reads were accepted and ignored; a policy
// name no row knows was found only after the rows before it had run.
TEST(SweepArgs, FlagsForRowsNotRunAndUnknownPoliciesAreRefusedFirst) {
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"lru", "kvtier", "no_such_set"};
            }).rfind("--policies: unknown sweep policy 'no_such_set'", 0),
            0u);
  EXPECT_EQ(
      RefusalOf([](SweepFlags& f) {
        f.policies = {"lru", "custom"};
        f.custom = "lru:always:fifo";
      })
          .rfind("--policies lru:always:fifo: unknown eviction policy 'fifo'; expected one of: "
                 "lru, ",
                 0),
      0u);
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"custom"};
              f.custom = "lru:always+maybe:lru";
            }).rfind("--policies lru:always+maybe:lru: unknown admission policy 'maybe'", 0),
            0u);
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"lru"};
              f.probation = 0.5;
            }),
            "--probation sets the marconi admission's probation; expected a policy set that "
            "admits with marconi in --policies");
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"marconi"};
              f.probation = -5;
            }),
            "--probation is -5; expected 0 to 1");
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"lru"};
              f.write_budget_gib_per_day = 5;
            })
                .rfind("--write-budget-gib-per-day and --write-budget-lru-share set the "
                       "write_budget admission's budget; expected a policy set that admits with "
                       "write_budget",
                       0),
            0u);
  EXPECT_EQ(RefusalOf([](SweepFlags& f) { f.hybrid_state_mib = 7; }),
            "--hybrid-kv-kib-per-token and --hybrid-state-mib describe the model of the hybrid "
            "table; expected --hybrid");
  // Below a byte per token the model's blocks were 0 bytes.
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.hybrid = true;
              f.hybrid_kv_kib_per_token = 0.0009;
            }),
            "--hybrid-kv-kib-per-token is 0.0009; expected 1/1024 (a byte) to 1048576");
  SweepFlags f;
  f.policies = {"marconi", "custom"};
  f.custom = "flop_aware:marconi+cost:reuse";
  f.probation = 0;
  EXPECT_TRUE(ValidateSweepFlags(f).ok()) << ValidateSweepFlags(f).message();
}

// A host share under one block was refused by the engine as "host capacity
// is 0 blocks", without the point or the trace's size.
TEST(SweepArgs, APointOfNoHostBlockNamesThePointAndTheTrace) {
  Result<SweepCapacity> cap = SweepCapacityAt("0.1:0.5", 10);
  ASSERT_TRUE(cap.ok()) << cap.status().ToString();
  EXPECT_EQ(cap->host_blocks, 1u);
  EXPECT_EQ(cap->nvme_blocks, 5u);
  cap = SweepCapacityAt("0.05:0.3", 10);
  ASSERT_FALSE(cap.ok());
  EXPECT_EQ(cap.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cap.status().message(),
            "--points 0.05:0.3: 5% of 10 unique blocks is 0 host blocks; expected a host "
            "fraction of at least 0.1 (one block)");
  EXPECT_EQ(SweepCapacityAt("1:0", 0).status().message(),
            "--points 1:0: 100% of 0 unique blocks is 0 host blocks; expected a trace with blocks");
  EXPECT_EQ(SweepCapacityAt("0:1", 10).status().message().rfind("--points: bad point '0:1'", 0),
            0u);
}

TEST(SweepArgs, WriteBudgetComesFromExactlyOneFlag) {
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"lru", "write_budget"};
            }),
            "--policies write_budget admits with write_budget, which needs a budget; expected "
            "--write-budget-gib-per-day GIB or --write-budget-lru-share SHARE (with lru in "
            "--policies)");
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"custom"};
              f.custom = "lru:frequency+write_budget:lru";
            })
                .rfind("--policies custom (--custom lru:frequency+write_budget:lru) admits with "
                       "write_budget, which needs a budget",
                       0),
            0u);
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"lru", "write_budget"};
              f.write_budget_gib_per_day = 2;
              f.write_budget_lru_share = 0.5;
            }),
            "--write-budget-gib-per-day and --write-budget-lru-share both set the write_budget "
            "admission's budget; expected one of them");
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"oracle", "write_budget"};
              f.write_budget_lru_share = 0.5;
            }),
            "--write-budget-lru-share is a share of the lru row's NVMe writes; expected lru in "
            "--policies");
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"lru", "kvtier"};
              f.custom = "lru:reuse:lru";
            }),
            "--custom lru:reuse:lru sets the 'custom' row's policies; expected custom in "
            "--policies");
  // A negative budget is out of range, not missing.
  EXPECT_EQ(RefusalOf([](SweepFlags& f) {
              f.policies = {"lru", "write_budget"};
              f.write_budget_gib_per_day = -5;
            }).rfind("--write-budget-gib-per-day is -5; expected 0 to 1e9", 0),
            0u);
  for (auto set : {+[](SweepFlags& f) {
                     f.policies = {"write_budget"};
                     f.write_budget_gib_per_day = 2;
                   },
                   +[](SweepFlags& f) {
                     f.policies = {"oracle", "write_budget", "lru"};
                     f.write_budget_lru_share = 0.5;
                   },
                   +[](SweepFlags& f) {
                     f.policies = {"lru", "oracle"};
                   }}) {
    SweepFlags f;
    set(f);
    EXPECT_TRUE(ValidateSweepFlags(f).ok()) << ValidateSweepFlags(f).message();
  }
}

// Seven shared prefixes, each request adding a block of its own: a small
// hub spills to NVMe, which LRU admits everything into.
Trace SpillingTrace() {
  Trace t;
  for (uint64_t i = 0; i < 200; ++i) {
    t.requests.push_back({i * 100, 2 * 512, 16, {1000 + i % 7, 2000 + i}});
  }
  return t;
}

// --write-budget-lru-share needed lru as the first row: listed after
// write_budget, the budget stayed 0 and the write_budget row failed.
TEST(SweepArgs, TheLruShareBudgetFindsLruWhereverItIsListed) {
  const Trace trace = SpillingTrace();
  const SweepEngine engine;
  const SweepCapacity cap{5, 50};
  SweepFlags f;
  f.policies = {"oracle", "write_budget", "lru"};
  f.write_budget_lru_share = 0.5;
  ASSERT_TRUE(ValidateSweepFlags(f).ok());
  std::vector<std::string> ran;
  Result<std::vector<SweepResult>> rows = RunSweepPoint(
      trace, engine, f, cap, {}, [&](const std::string& name, double) { ran.push_back(name); });
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(ran, (std::vector<std::string>{"lru", "oracle", "write_budget"}));
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].label, "oracle (Belady)");
  EXPECT_EQ((*rows)[1].label, "write_budget+LRU");
  EXPECT_EQ((*rows)[2].label, "admit-all+LRU");

  // The same row as run by hand with half of lru's bytes per modeled day.
  const SweepResult& lru = (*rows)[2];
  ASSERT_GT(lru.bytes_written_nvme, 0u);
  PolicyKnobs knobs;
  knobs.write_budget_bytes_per_day =
      static_cast<uint64_t>(0.5 * double(lru.bytes_written_nvme) / lru.sim_seconds * 86400.0);
  Result<SweepResult> by_hand =
      RunSweepOne(trace, engine, *NamedSweepPolicy("write_budget"), cap, knobs);
  ASSERT_TRUE(by_hand.ok()) << by_hand.status().ToString();
  EXPECT_EQ((*rows)[1].bytes_written_nvme, by_hand->bytes_written_nvme);
  EXPECT_EQ((*rows)[1].hit_tokens_nvme, by_hand->hit_tokens_nvme);

  // Rows listed before lru are compared with it too.
  const std::string table = FormatSweepTable(*rows, engine.BlockBytes());
  const size_t wb = table.find("| write_budget+LRU |");
  ASSERT_NE(wb, std::string::npos) << table;
  EXPECT_EQ(table.substr(wb, table.find('\n', wb) - wb).find("| - |"), std::string::npos) << table;

  // No NVMe tier: lru writes nothing, so the share of it is no budget.
  rows = RunSweepPoint(trace, engine, f, {5, 0}, {});
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().message(),
            "write_budget: --write-budget-lru-share 0.5 of admit-all+LRU's NVMe writes (0 bytes "
            "with 0 NVMe blocks) is a budget of 0 bytes per day, less than one; expected a larger "
            "share, a point with NVMe capacity, or --write-budget-gib-per-day");

  // A share so small the budget rounds to nothing says so; one so large it
  // overflowed a uint64_t (and read as "it wrote none") is no limit.
  f.write_budget_lru_share = 1e-30;
  rows = RunSweepPoint(trace, engine, f, cap, {});
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find(" bytes per day, less than one"), std::string::npos)
      << rows.status().message();
  EXPECT_EQ(rows.status().message().find("(0 bytes with"), std::string::npos)
      << rows.status().message();
  f.write_budget_lru_share = 1e30;
  rows = RunSweepPoint(trace, engine, f, cap, {});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ((*rows)[1].bytes_written_nvme, (*rows)[2].bytes_written_nvme);  // as admit-all
}

// A budget under one byte a day passed the flag check and failed after the
// first rows, naming a knob the command line does not have.
TEST(SweepArgs, ABudgetUnderOneBytePerDayIsRefusedAtTheFlag) {
  SweepFlags f;
  f.write_budget_gib_per_day = 1e-12;
  EXPECT_EQ(SweepKnobs(f).status().message(),
            "--write-budget-gib-per-day is 1e-12; expected at least one byte per day (9.32e-10 "
            "GiB)");
}

}  // namespace
}  // namespace kvtier::bench
