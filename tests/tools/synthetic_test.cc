#include "tools/bench/synthetic.h"

#include <gtest/gtest.h>

#include <map>

namespace kvtier::bench {
namespace {

SyntheticOptions HandOptions() {
  SyntheticOptions o;
  o.sessions = 2;
  o.steps = 2;
  o.system_prompts = 1;
  o.system_prompt_blocks = 2;
  o.initial_blocks = 1;
  o.growth_blocks = 1;
  o.growth_jitter = 0;
  o.output_tokens = 7;
  o.session_stagger_ms = 500;
  o.step_interval_ms = 2000;
  o.interval_jitter = 0;
  return o;
}

TEST(SyntheticTest, HandComputedTwoSessionsTwoSteps) {
  Result<Trace> t = GenerateSyntheticTrace(HandOptions());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 4u);
  // Session 0 step 0, session 1 step 0, session 0 step 1, session 1 step 1.
  const std::vector<uint64_t> ts = {0, 500, 2000, 2500};
  const std::vector<std::vector<uint64_t>> ids = {{0, 1, 2}, {0, 1, 3}, {0, 1, 2, 4}, {0, 1, 3, 5}};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(t->requests[i].timestamp_ms, ts[i]);
    EXPECT_EQ(t->requests[i].hash_ids, ids[i]);
    EXPECT_EQ(t->requests[i].input_length, ids[i].size() * 512);
    EXPECT_EQ(t->requests[i].output_length, 7u);
  }
  InfiniteCacheStats s = ComputeInfiniteCacheStats(*t);
  EXPECT_EQ(s.blocks, 14u);
  EXPECT_EQ(s.hit_blocks, 8u);  // 0 + 2 + 3 + 3
  EXPECT_EQ(s.unique_blocks, 6u);
  EXPECT_EQ(s.hit_tokens, 8u * 512);
}

TEST(SyntheticTest, SameSeedSameTraceOtherSeedDiffers) {
  SyntheticOptions o;
  Result<Trace> a = GenerateSyntheticTrace(o);
  Result<Trace> b = GenerateSyntheticTrace(o);
  o.seed = 2;
  Result<Trace> c = GenerateSyntheticTrace(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->requests.size(), b->requests.size());
  bool differs = a->requests.size() != c->requests.size();
  for (size_t i = 0; i < a->requests.size(); ++i) {
    EXPECT_EQ(a->requests[i].timestamp_ms, b->requests[i].timestamp_ms);
    EXPECT_EQ(a->requests[i].hash_ids, b->requests[i].hash_ids);
    if (i < c->requests.size() && (a->requests[i].hash_ids != c->requests[i].hash_ids ||
                                   a->requests[i].timestamp_ms != c->requests[i].timestamp_ms)) {
      differs = true;
    }
  }
  EXPECT_TRUE(differs);
}

TEST(SyntheticTest, EachStepExtendsItsSessionsPreviousStep) {
  SyntheticOptions o;  // defaults: jittered growth and intervals
  Result<Trace> t = GenerateSyntheticTrace(o);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->requests.size(), uint64_t{o.sessions} * o.steps);
  // Recover sessions: a request continues the session whose last context is
  // its strict prefix. Ids are unique per new block, so the match is unique.
  std::vector<std::vector<uint64_t>> sessions;
  uint64_t last_ts = 0;
  for (const TraceRequest& r : t->requests) {
    EXPECT_GE(r.timestamp_ms, last_ts);
    last_ts = r.timestamp_ms;
    EXPECT_EQ(r.input_length, r.hash_ids.size() * o.block_tokens);
    size_t matches = 0;
    for (auto& s : sessions) {
      if (r.hash_ids.size() > s.size() && std::equal(s.begin(), s.end(), r.hash_ids.begin()) &&
          r.hash_ids.size() - s.size() >= 1 &&
          r.hash_ids.size() - s.size() <= o.growth_blocks + o.growth_jitter) {
        s = r.hash_ids;
        ++matches;
        break;
      }
    }
    if (matches == 0) {
      EXPECT_EQ(r.hash_ids.size(), o.system_prompt_blocks + o.initial_blocks);
      sessions.push_back(r.hash_ids);
    }
  }
  EXPECT_EQ(sessions.size(), o.sessions);
  // Sessions share their system prompt's ids: at most system_prompts distinct
  // prompt prefixes.
  std::map<std::vector<uint64_t>, int> prompts;
  for (const auto& s : sessions) {
    prompts[std::vector<uint64_t>(s.begin(), s.begin() + o.system_prompt_blocks)]++;
  }
  EXPECT_LE(prompts.size(), o.system_prompts);
  EXPECT_GE(prompts.size(), 1u);
}

TEST(SyntheticTest, SpecSetsFieldsAndRejectsBadInput) {
  SyntheticOptions o;
  ASSERT_TRUE(ApplySyntheticSpec("sessions=3,steps=4,interval_jitter=0.25,seed=9", &o).ok());
  EXPECT_EQ(o.sessions, 3u);
  EXPECT_EQ(o.steps, 4u);
  EXPECT_EQ(o.seed, 9u);
  EXPECT_DOUBLE_EQ(o.interval_jitter, 0.25);

  Status st = ApplySyntheticSpec("sesions=3", &o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "unknown generator option \"sesions\"");
  st = ApplySyntheticSpec("steps=x", &o);
  EXPECT_EQ(st.message(), "generator option steps: expected a non-negative integer, got \"x\"");
  st = ApplySyntheticSpec("steps", &o);
  EXPECT_EQ(st.message(), "generator option \"steps\" is not key=value");
  st = ApplySyntheticSpec("steps=4294967296", &o);
  EXPECT_EQ(st.message(), "generator option steps: value 4294967296 is out of range");

  SyntheticOptions bad;
  bad.sessions = 0;
  EXPECT_EQ(GenerateSyntheticTrace(bad).status().message(), "sessions must be > 0");
  bad = SyntheticOptions();
  bad.interval_jitter = 1.0;
  EXPECT_EQ(GenerateSyntheticTrace(bad).status().message(), "interval_jitter must be in [0, 1)");
}

// Traces are built in memory: sizes that cannot fit are refused up front,
// with no allocation and no overflow in the products.
TEST(SyntheticTest, TracesTooLargeToHoldAreRefused) {
  SyntheticOptions o;
  ASSERT_TRUE(ApplySyntheticSpec("sessions=4000000000,steps=1", &o).ok());
  EXPECT_EQ(o.Validate().message(), "sessions * steps is 4000000000 requests; at most 10000000");
  EXPECT_EQ(GenerateSyntheticTrace(o).status().code(), StatusCode::kInvalidArgument);
  o.sessions = 4294967295u;
  o.steps = 4294967295u;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);

  o = SyntheticOptions();
  o.sessions = 10'000'000;
  o.steps = 1;
  o.system_prompt_blocks = 100;
  EXPECT_EQ(o.Validate().message(),
            "the trace could hold more than 200000000 block ids; use fewer sessions, steps or "
            "blocks");
  // One step past the request cap; and a growth so large its product with
  // the steps would wrap 64 bits.
  o = SyntheticOptions();
  o.sessions = 1;
  o.steps = 10'000'001;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o.steps = 10'000'000;
  o.block_tokens = 4096;
  o.growth_blocks = 4294967295u;
  o.growth_jitter = 4294967295u;
  EXPECT_EQ(o.Validate().message(), "the longest context would exceed 2^32 tokens");
  o = SyntheticOptions();
  o.sessions = 1000;
  o.steps = 100;
  EXPECT_TRUE(o.Validate().ok());
}

// Prompts no session uses cost nothing: 4e9 of them allocated 96 GB, and
// the generator threw bad_alloc.
TEST(SyntheticTest, ManyMorePromptsThanSessionsHoldOnlyTheUsedOnes) {
  SyntheticOptions o;
  o.sessions = 4;
  o.steps = 2;
  o.system_prompts = 4'000'000'000u;
  auto t = GenerateSyntheticTrace(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->requests.size(), 8u);
}

}  // namespace
}  // namespace kvtier::bench
