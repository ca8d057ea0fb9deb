// The reuse learner (policy/reuse_model.h) and the `reuse` admission and
// eviction built on it, on hand-built sequences with exact classes, rates,
// decisions and orders.
#include "policy/reuse_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kvtier/policy.h"
#include "policy/policy_build.h"
#include "tests/policy/reuse_knobs.h"

namespace kvtier {
namespace {

using internal::ReuseModel;

using testing::ExactReuseKnobs;

// Requests whose rates are worked out in the comments of each test:
// r1 names 1..4 (length class 8); r2 names 50 (length class 0); r3 names
// 1, 2 again (a continuation of a known 2-block path, nothing new).
template <typename P>
void ObserveThree(P& p) {
  const std::vector<uint64_t> r1 = {1, 2, 3, 4}, r2 = {50}, r3 = {1, 2};
  p.ObserveRequest(r1, 4, RequestHints{}, 0);
  p.ObserveRequest(r2, 1, RequestHints{}, 0);
  p.ObserveRequest(r3, 2, RequestHints{}, 0);
}

struct ModelAdapter {  // gives ReuseModel the policies' ObserveRequest signature
  ReuseModel& m;
  void ObserveRequest(std::span<const uint64_t> c, uint32_t full, const RequestHints&, uint64_t) {
    m.ObserveRequest(c, full);
  }
};

TEST(ReuseModelTest, ClassesFollowLengthThenOutputAfterTheFinish) {
  ReuseModel m(ExactReuseKnobs());
  m.ObserveRequest(std::vector<uint64_t>{1, 2, 3, 4}, 4);
  m.ObserveRequest(std::vector<uint64_t>{10, 11, 12}, 3);
  m.ObserveRequest(std::vector<uint64_t>{1, 2, 20, 21}, 4);  // continues 1, 2
  m.ObserveRequest(std::vector<uint64_t>{30, 31, 32}, 2);    // 32 is partial
  EXPECT_FALSE(m.Unfinished(10));                     // no finish reported yet: never "unfinished"
  m.ObserveFinish(std::vector<uint64_t>{10, 11}, 7);  // not a request's chain: ignored
  EXPECT_TRUE(m.Unfinished(10));
  m.ObserveFinish(std::vector<uint64_t>{10, 11, 12}, 7);
  m.ObserveFinish(std::vector<uint64_t>{1, 2, 20, 21}, 1);
  m.ObserveFinish(std::vector<uint64_t>{1, 2, 3, 4}, 0);
  m.ObserveFinish(std::vector<uint64_t>{30, 31, 32}, 100000);
  struct Row {
    uint64_t id;
    size_t cls;
  };
  const Row rows[] = {
      {1, ReuseModel::kRenamedBase + 1},   // named again by a request that output 1 token
      {3, ReuseModel::kOutputBase + 0},    // output 0 tokens: octave 0
      {10, ReuseModel::kOutputBase + 3},   // output 7 tokens: octave 3
      {20, ReuseModel::kContinued},        // continued paths keep their class
      {30, ReuseModel::kOutputBase + 13},  // 100000 tokens: the last octave
      {32, ReuseModel::LengthClass(3)},    // partial: never re-classed
      {99, ReuseModel::kClasses},          // unknown
  };
  for (const Row& r : rows) EXPECT_EQ(m.ClassOf(r.id), r.cls) << "block " << r.id;
  EXPECT_EQ(ReuseModel::LengthClass(3), 6u);  // floor(4 log2 3)
  EXPECT_TRUE(m.Partial(32));
  EXPECT_FALSE(m.Partial(31));
  EXPECT_FALSE(m.Unfinished(10));
  // Named again (1, 2: a third time) by a request still decoding: by
  // sightings until it finishes, then by its output class, per sightings.
  m.ObserveRequest(std::vector<uint64_t>{1, 2, 20, 21, 22}, 5);
  EXPECT_EQ(m.ClassOf(1), ReuseModel::kTwice + 1);
  EXPECT_EQ(m.ClassOf(20), ReuseModel::kTwice);
  m.ObserveFinish(std::vector<uint64_t>{1, 2, 20, 21, 22}, 300);  // octave 9
  EXPECT_EQ(m.ClassOf(1), ReuseModel::kRenamedBase + ReuseModel::kOutputClasses + 9);
  EXPECT_EQ(m.ClassOf(20), ReuseModel::kRenamedBase + 9);
  EXPECT_EQ(m.ClassOf(22), ReuseModel::kContinued);  // new on a continued path
  // A block named again before the finish is judged by its last namer:
  // 10 by the unfinished second request, 12 by the first one's output.
  m.ObserveRequest(std::vector<uint64_t>{10, 11, 12, 13}, 4);
  m.ObserveRequest(std::vector<uint64_t>{10, 11, 14}, 3);
  m.ObserveFinish(std::vector<uint64_t>{10, 11, 12, 13}, 2);  // octave 2
  EXPECT_EQ(m.ClassOf(10), ReuseModel::kTwice + 1);
  EXPECT_EQ(m.ClassOf(12), ReuseModel::kRenamedBase + 2);
}

// Finishes that never come age out oldest first once 2^16 requests wait:
// the newest keep theirs, so one flood of aborted requests does not cost
// the requests still decoding their class.
TEST(ReuseModelTest, PendingFinishesAgeOutOldestFirst) {
  ReuseModel m(ExactReuseKnobs());
  const uint64_t waiting = uint64_t{1} << 16;
  for (uint64_t r = 0; r <= waiting; ++r) m.ObserveRequest(std::vector<uint64_t>{1000 + r}, 1);
  m.ObserveRequest(std::vector<uint64_t>{5}, 1);  // one over the bound: the oldest goes
  m.ObserveFinish(std::vector<uint64_t>{1000}, 1);
  m.ObserveFinish(std::vector<uint64_t>{1000 + waiting}, 1);
  EXPECT_EQ(m.ClassOf(1000), ReuseModel::LengthClass(1));  // aged out: its finish is ignored
  EXPECT_EQ(m.ClassOf(1000 + waiting), ReuseModel::kOutputBase + 1);
}

// Past its bound the tree forgets the least recently named blocks, as many
// as each request adds, and keeps the rest: a prefix every request names
// stays known, the blocks named twice most recently keep their class, and
// the tree never holds more than its bound.
TEST(ReuseModelTest, ForgetsTheLeastRecentlyNamedBlocksPastItsBound) {
  constexpr uint64_t kBound = 64, kPrefix = 1, kFirst = 100, kRequests = 300;
  ReuseModel m(ExactReuseKnobs(), kBound);
  for (uint64_t r = 0; r < kRequests; ++r) {
    const uint64_t tail = kFirst + r;
    m.ObserveRequest(std::vector<uint64_t>{kPrefix, tail}, 2);
    EXPECT_LE(m.TEST_Nodes(), kBound) << "request " << r;
    m.ObserveRequest(std::vector<uint64_t>{kPrefix, tail}, 2);
    EXPECT_EQ(m.TEST_Nodes(), std::min(r + 2, kBound)) << "request " << r;
    ASSERT_EQ(m.ClassOf(tail), ReuseModel::kTwice) << "named twice just now, request " << r;
    ASSERT_TRUE(m.Known(kPrefix)) << "request " << r;
  }
  const uint64_t kept = kFirst + kRequests - (kBound - 1);  // the oldest tail still held
  for (uint64_t id = kFirst; id < kept; ++id) EXPECT_FALSE(m.Known(id)) << id;
  for (uint64_t id = kept; id < kFirst + kRequests; ++id) {
    EXPECT_EQ(m.ClassOf(id), ReuseModel::kTwice) << id;
  }
  // A forgotten block named again is new: judged by its request's length.
  m.ObserveRequest(std::vector<uint64_t>{kPrefix, kFirst}, 2);
  EXPECT_EQ(m.ClassOf(kFirst), ReuseModel::LengthClass(2));
}

// One request of full blocks that runs to its finish.
void Turn(ReuseModel& m, const std::vector<uint64_t>& chain, uint32_t output) {
  m.ObserveRequest(chain, uint32_t(chain.size()));
  m.ObserveFinish(chain, output);
}

// Blocks named again are learned by the output class of the request that
// named them last: a path continued by short tool-call turns keeps coming
// back, a path whose last turn wrote a long answer does not.
TEST(ReuseModelTest, RenamedBlocksLearnTheirLastNamersOutputClass) {
  ReuseModel m(ExactReuseKnobs());
  auto turn = [&m](std::vector<uint64_t> chain, uint32_t output) { Turn(m, chain, output); };
  turn({1, 2}, 1);
  turn({1, 2, 3}, 1);  // 1, 2 named again; short output: class R(1)
  turn({20, 21}, 1);
  turn({20, 21, 22}, 1);  // 20, 21: R(1) too
  turn({10, 11}, 1000);
  turn({10, 11, 12}, 1000);  // 10, 11 named again; long output: R(1000)
  turn({1, 2, 3, 4}, 1);     // 1, 2 come back; 3, named again, joins R(1)
  for (uint64_t id = 100; id < 104; ++id) turn({id}, 5);  // lets every class mature
  EXPECT_EQ(m.ClassOf(20), ReuseModel::kRenamedBase + 1);
  EXPECT_EQ(m.RateOf(20), 0.4);  // R(1): 1, 2 of 1, 2, 20, 21, 3 came back
  EXPECT_EQ(m.ClassOf(10), ReuseModel::kRenamedBase + ReuseModel::OutputClass(1000));
  EXPECT_EQ(m.RateOf(10), 0.0);
}

// A block's level (named twice, or three or more times) is the one its
// request named it at: X names 1, 2 a second time, Y a third time before X
// finishes. X's finish counts them in "twice" (reused since: by Y), Y's in
// "three or more" (never back). A turn that adds no full block is not
// followed to its finish: the blocks it names again keep their sightings.
TEST(ReuseModelTest, RenamedBlocksCountAtTheLevelTheirRequestNamedThem) {
  ReuseModel m(ExactReuseKnobs());
  auto turn = [&m](std::vector<uint64_t> chain, uint32_t output) { Turn(m, chain, output); };
  turn({1, 2}, 1);
  m.ObserveRequest(std::vector<uint64_t>{1, 2, 3}, 3);  // X
  m.ObserveRequest(std::vector<uint64_t>{1, 2, 4}, 3);  // Y, X still decoding
  m.ObserveFinish(std::vector<uint64_t>{1, 2, 3}, 1);
  m.ObserveFinish(std::vector<uint64_t>{1, 2, 4}, 1);
  turn({50, 51}, 1);
  turn({50, 51, 52}, 1);  // 50, 51: twice, output 1, never back
  for (uint64_t id = 100; id < 110; ++id) turn({id}, 5);
  EXPECT_EQ(m.ClassOf(50), ReuseModel::kRenamedBase + 1);
  EXPECT_EQ(m.RateOf(50), 0.5);  // twice x output 1: 1, 2 (back) and 50, 51
  EXPECT_EQ(m.ClassOf(1), ReuseModel::kRenamedBase + ReuseModel::kOutputClasses + 1);
  EXPECT_EQ(m.RateOf(1), 0.0);  // three or more x output 1: 1, 2, never back

  m.ObserveRequest(std::vector<uint64_t>{50, 51, 60}, 2);  // 60 is partial
  m.ObserveFinish(std::vector<uint64_t>{50, 51, 60}, 1);
  EXPECT_EQ(m.ClassOf(50), ReuseModel::kTwice + 1);
  // While a request decodes its new full blocks are unfinished, its partial
  // last block is not: it is never written, so there is nothing to wait for.
  m.ObserveRequest(std::vector<uint64_t>{70, 71, 72}, 2);
  EXPECT_TRUE(m.Unfinished(71));
  EXPECT_FALSE(m.Unfinished(72));
}

TEST(ReuseModelTest, RatesCountOnlyMaturedBlocks) {
  ReuseModel m(ExactReuseKnobs());
  ModelAdapter a{m};
  const std::vector<uint64_t> r1 = {1, 2, 3, 4}, r2 = {50}, r3 = {1, 2};
  a.ObserveRequest(r1, 4, {}, 0);
  // Nothing matured yet (the mean reuse lag starts at 1 request).
  EXPECT_EQ(m.RateOf(1), -1);
  EXPECT_EQ(m.FirstSightingRate(), -1);
  a.ObserveRequest(r2, 1, {}, 0);  // r1's 4 blocks mature: class 8 = 0 / 4
  EXPECT_EQ(m.RateOf(1), 0.0);
  EXPECT_EQ(m.RateOf(50), -1);            // r2's block has not matured
  a.ObserveRequest(r3, 2, {}, 0);         // r2's block matures; 1 and 2 come back
  EXPECT_EQ(m.RateOf(3), 0.5);            // class 8: 2 reused / 4 matured
  EXPECT_EQ(m.RateOf(50), 0.0);           // class 0: 0 / 1
  EXPECT_EQ(m.FirstSightingRate(), 0.4);  // (2 + 0) / (4 + 1)
  EXPECT_EQ(m.RateOf(1), -1);             // "named twice" has matured nothing yet
}

// Asks `p` about block `id` (seen `sightings` times) for a tier of 100
// bytes with `used` bytes used.
bool AdmitInTier100(AdmissionPolicy& p, uint64_t id, uint32_t sightings, uint64_t used) {
  BlockMeta b;
  b.id = id;
  b.sightings = sightings;
  TierState tier;
  tier.capacity_bytes = 100;
  tier.used_bytes = used;
  return p.Admit(b, tier);
}

TEST(ReuseAdmissionTest, AdmitsClassesAboveRatioTimesTheAverage) {
  PolicyKnobs k = ExactReuseKnobs();
  struct Row {
    double ratio;
    uint64_t id;
    uint32_t sightings;
    uint64_t used;  // of a tier of 100 bytes
    bool admit;
  };
  // Rates after ObserveThree: class 8 (blocks 3, 4) 0.5, class 0 (block 50)
  // 0, named twice (1, 2) not learned, the first-sighting average 0.4.
  const Row rows[] = {
      {0.7, 3, 0, 0, true},     // 0.5 >= 0.7 x 0.4
      {1.25, 3, 0, 0, true},    // 0.5 >= 1.25 x 0.4 (equal)
      {1.3, 3, 0, 0, false},    // 0.5 < 0.52
      {0.7, 50, 0, 0, false},   // 0 < 0.28
      {0.0, 50, 0, 0, true},    // ratio 0 admits every learned class into free space
      {0.0, 50, 0, 94, true},   // 94 % used: still free space
      {0.0, 50, 0, 95, false},  // 95 % used (full): the ratio is at least 1
      {0.0, 3, 0, 95, true},    // 0.5 >= 1 x 0.4
      {5.0, 1, 0, 0, true},     // not learned yet: admitted
      {0.7, 99, 1, 0, false},   // unknown to the tree: only if seen twice
      {0.7, 99, 2, 0, true},
  };
  for (const Row& r : rows) {
    k.reuse_ratio = r.ratio;
    auto p = CreateAdmissionPolicy("reuse", k);
    ASSERT_TRUE(p.ok());
    ObserveThree(**p);
    EXPECT_EQ(AdmitInTier100(**p, r.id, r.sightings, r.used), r.admit)
        << "ratio " << r.ratio << " block " << r.id << " used " << r.used;
  }
}

// reuse_fill_share admits every full block the tree knows while the tier is
// below that share of its capacity, whatever its class; above it the class
// cut applies again. Blocks the tree never saw and partial blocks keep their
// own rules.
TEST(ReuseAdmissionTest, FillShareAdmitsEveryKnownBlockIntoFreeSpace) {
  PolicyKnobs k = ExactReuseKnobs();
  k.reuse_fill_share = 0.5;
  auto p = CreateAdmissionPolicy("reuse", k);
  ASSERT_TRUE(p.ok());
  ObserveThree(**p);
  const std::vector<uint64_t> partial = {60, 61};
  (*p)->ObserveRequest(partial, 1, RequestHints{}, 0);  // 61 is partial
  struct Row {
    uint64_t id;
    uint32_t sightings;
    uint64_t used;  // of a tier of 100 bytes
    bool admit;
  };
  const Row rows[] = {
      {50, 0, 49, true},   // class rate 0, but the tier is below half full
      {50, 0, 50, false},  // half full: 0 < 0.7 x 0.4
      {3, 0, 50, true},    // 0.5 >= 0.7 x 0.4
      {61, 0, 0, false},   // a partial block, even into an empty tier
      {99, 1, 0, false},   // unknown to the tree: only if seen twice
  };
  for (const Row& r : rows) {
    EXPECT_EQ(AdmitInTier100(**p, r.id, r.sightings, r.used), r.admit)
        << "block " << r.id << " used " << r.used;
  }
  k.reuse_fill_share = 1.5;
  EXPECT_EQ(k.Validate().message(), "reuse_fill_share must be in [0, 1]");
}

std::vector<uint64_t> OrderIds(EvictionPolicy& p, std::vector<BlockMeta> c, uint64_t now) {
  p.Order(c, now);
  std::vector<uint64_t> ids;
  for (const BlockMeta& b : c) ids.push_back(b.id);
  return ids;
}

BlockMeta Used(uint64_t id, uint64_t last_use_ns) {
  BlockMeta b;
  b.id = id;
  b.last_use_ns = last_use_ns;
  return b;
}

TEST(ReuseEvictionTest, LowestRateOverAgeLeavesFirstAndUnfinishedLast) {
  PolicyKnobs k = ExactReuseKnobs();
  k.reuse_age_exponent = 1;  // hyperbolic
  auto p = CreateEvictionPolicy("reuse", k);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->Name(), "reuse");
  ObserveThree(**p);
  // Priority = rate / (age + 1 ns) at now = 1000; unknown classes (named
  // twice, not learned; id 99) take the average 0.4.
  const std::vector<uint64_t> order =
      OrderIds(**p,
               {Used(3, 0),     // 0.5 / 1001
                Used(50, 900),  // 0 / 101: never comes back, goes first
                Used(99, 600),  // 0.4 / 401
                Used(4, 990),   // 0.5 / 11
                Used(1, 0)},    // 0.4 / 1001
               1000);
  EXPECT_EQ(order, (std::vector<uint64_t>{50, 1, 3, 99, 4}));
  // Once finishes are reported, blocks of a request still decoding leave
  // last (LRU among them). r1 and r2 finish; their blocks' output class has
  // matured nothing, so they keep their length class's rate.
  (*p)->ObserveRequest(std::vector<uint64_t>{60, 61}, 2, {}, 0);
  (*p)->ObserveFinish(std::vector<uint64_t>{50}, 10, 0);
  EXPECT_EQ(OrderIds(**p, {Used(60, 0), Used(4, 999)}, 1000), (std::vector<uint64_t>{60, 4}));
  (*p)->ObserveFinish(std::vector<uint64_t>{1, 2, 3, 4}, 10, 0);
  EXPECT_EQ(OrderIds(**p, {Used(60, 0), Used(50, 0), Used(4, 999)}, 1000),
            (std::vector<uint64_t>{50, 4, 60}));
  (*p)->ObserveFinish(std::vector<uint64_t>{60, 61}, 10, 0);  // 60 finished: by rate / age
  EXPECT_EQ(OrderIds(**p, {Used(4, 999), Used(60, 0)}, 1000), (std::vector<uint64_t>{60, 4}));
}

// The age exponent sets how much the class weighs against idle time: block
// 3 (rate 0.5, idle 1001 ns) and block 99 (unknown: the average 0.4, idle
// 701 ns) swap places between 1 and the default 0.5.
TEST(ReuseEvictionTest, AgeExponentWeighsTheClassAgainstIdleTime) {
  struct Row {
    double exponent;
    std::vector<uint64_t> order;
  };
  const Row rows[] = {
      {1.0, {3, 99}},  // 0.5 / 1001 < 0.4 / 701
      {0.5, {99, 3}},  // 0.4 / 26.5 < 0.5 / 31.6
      {2.0, {3, 99}},
  };
  for (const Row& r : rows) {
    PolicyKnobs k = ExactReuseKnobs();
    k.reuse_age_exponent = r.exponent;
    auto p = CreateEvictionPolicy("reuse", k);
    ASSERT_TRUE(p.ok());
    ObserveThree(**p);
    EXPECT_EQ(OrderIds(**p, {Used(3, 0), Used(99, 300)}, 1000), r.order) << r.exponent;
  }
  EXPECT_EQ(PolicyKnobs{}.reuse_age_exponent, 0.5);
  PolicyKnobs bad;
  bad.reuse_age_exponent = 0;
  EXPECT_EQ(bad.Validate().message(), "reuse_age_exponent must be in (0, 4]");
}

// A copy a slower tier also holds leaves before everything else, even a
// block of a class that never comes back and a block of an unfinished
// request: dropping it costs no write and loses no hit. Among backed copies
// the usual order holds.
TEST(ReuseEvictionTest, BackedCopiesLeaveFirst) {
  auto p = CreateEvictionPolicy("reuse", ExactReuseKnobs());
  ASSERT_TRUE(p.ok());
  ObserveThree(**p);
  (*p)->ObserveRequest(std::vector<uint64_t>{60, 61}, 2, {}, 0);
  (*p)->ObserveFinish(std::vector<uint64_t>{50}, 10, 0);
  (*p)->ObserveFinish(std::vector<uint64_t>{1, 2, 3, 4}, 10, 0);  // 60 still decoding
  auto backed = [](BlockMeta b) {
    b.backed = true;
    return b;
  };
  EXPECT_EQ(
      OrderIds(**p, {Used(50, 900), Used(60, 0), backed(Used(4, 999)), backed(Used(3, 0))}, 1000),
      (std::vector<uint64_t>{3, 4, 50, 60}));
  EXPECT_EQ(OrderIds(**p, {Used(50, 900), backed(Used(60, 0))}, 1000),
            (std::vector<uint64_t>{60, 50}));
}

struct SharedAdapter {  // gives SharedReuseModels the policies' ObserveRequest signature
  internal::SharedReuseModels& m;
  void ObserveRequest(std::span<const uint64_t> c, uint32_t full, const RequestHints&, uint64_t) {
    m.ObserveRequest(c, full);
  }
};

// The `reuse` policies of one cache share one learner per knob set, which
// the cache feeds once per request: a policy's own observations do not feed
// it again, and what the cache feeds reaches every policy built from it,
// which then decides exactly as a policy with its own learner does.
TEST(SharedReuseModelsTest, PoliciesShareOneLearnerPerKnobSetFedOnce) {
  internal::SharedReuseModels models;
  const PolicyKnobs k = ExactReuseKnobs();
  auto admission = internal::BuildAdmission("reuse", k, 0, &models);
  auto eviction = internal::BuildEviction("reuse", k, &models);
  ASSERT_TRUE(admission.ok() && eviction.ok());
  EXPECT_EQ(models.size(), 1u);
  EXPECT_EQ(models.For(k), models.For(k));
  PolicyKnobs other = k;
  other.reuse_min_samples = 2;
  EXPECT_NE(models.For(other), models.For(k));
  EXPECT_EQ(models.size(), 2u);

  (*admission)->ObserveRequest(std::vector<uint64_t>{7, 8}, 2, {}, 0);
  EXPECT_FALSE(models.For(k)->Known(7));  // the owner feeds, not the policy

  SharedAdapter feed{models};
  ObserveThree(feed);
  EXPECT_TRUE(models.For(other)->Known(50));
  EXPECT_EQ(OrderIds(**eviction,
                     {Used(3, 0), Used(50, 900), Used(99, 600), Used(4, 990), Used(1, 0)}, 1000),
            (std::vector<uint64_t>{50, 1, 3, 99, 4}));
  EXPECT_FALSE(AdmitInTier100(**admission, 50, 0, 0));  // class rate 0 < 0.7 x 0.4
  EXPECT_TRUE(AdmitInTier100(**admission, 3, 0, 0));    // 0.5 >= 0.7 x 0.4
  // Public factories keep a learner of their own, fed by what they observe.
  auto own = CreateAdmissionPolicy("reuse", k);
  ASSERT_TRUE(own.ok());
  ObserveThree(**own);
  EXPECT_FALSE(AdmitInTier100(**own, 50, 0, 0));
  EXPECT_TRUE(AdmitInTier100(**own, 3, 0, 0));
}

}  // namespace
}  // namespace kvtier
