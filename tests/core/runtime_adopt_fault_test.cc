// Adoption when the tier's Contains misbehaves: it fails for some keys,
// never answers, answers slowly, reports a block its reads then cannot
// serve, or holds a chain with a hole. A lookup still answers, soon, with
// a prefix the tier can serve; a load never copies wrong bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/fault_tier.h"
#include "tests/support/returns_within.h"
#include "tests/support/tier_view.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class RuntimeAdoptFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_ = MakeEngine(64);
    bb_ = setup_.layout.BlockBytes();
    auto disk = CreateTier(LowerHostTier("disk", bb_, 32), TierContext{bb_});
    ASSERT_TRUE(disk.ok()) << disk.status().ToString();
    disk_ = std::shared_ptr<Tier>(std::move(disk).value());
  }
  void TearDown() override {
    faults_->Clear();  // a held Contains would keep the tier's Shutdown waiting
    rt_.reset();
    disk_->Shutdown();
  }

  // A runtime with an 8-block hub over the disk, which it sees as a
  // persistent tier with a local index, wrapped with `f` and faults_.
  void Open(FaultOptions f = {}) {
    f.contains = faults_;
    RuntimeOptions o = MakeOptions(bb_, 8);
    o.tiers.push_back(LowerHostTier("disk", bb_, 32));
    std::shared_ptr<Tier> disk = disk_;
    o.tier_factory = [disk, f](const TierOptions&,
                               const TierContext&) -> Result<std::unique_ptr<Tier>> {
      auto view = NewTierView(disk, TierCapabilities{.persistent = true, .local_index = true});
      return NewFaultInjectingTier(std::move(view), f);
    };
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }

  // Stores `keys` on the disk, as an earlier run left them.
  void StoreOnDisk(const std::vector<BlockKey>& keys) {
    for (const BlockKey& key : keys) {
      std::vector<std::byte> bytes = BlockBytes(key, bb_);
      WriteOp w{key, bytes};
      ASSERT_TRUE(disk_->Write(kTestNs, std::span(&w, 1)).Wait().ok());
    }
  }

  // Stores `keys` on the disk, opens over it with `f`, adopts them all and
  // loads them into engine blocks 8 and on: each load ends with `code`,
  // and none writes wrong bytes.
  void ExpectAdoptedLoadsFail(const std::vector<BlockKey>& keys, FaultOptions f, StatusCode code) {
    ASSERT_NO_FATAL_FAILURE(StoreOnDisk(keys));
    ASSERT_NO_FATAL_FAILURE(Open(f));
    ASSERT_EQ(Hits(keys), keys.size());
    sim_->Scrub(0, 64);
    Completion c = sim_->Load(keys, 8);
    for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(c.result(i).code(), code) << i;
    ExpectNoWrongBytes(c, keys, 8);
  }

  size_t Hits(const std::vector<BlockKey>& keys) {
    auto r = rt_->Lookup(kTestNs, keys);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->hit_blocks : 0;
  }

  // Blocks that loaded hold their key's bytes; failed ones were not written.
  void ExpectNoWrongBytes(const Completion& c, const std::vector<BlockKey>& keys, uint32_t first) {
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint32_t b = first + static_cast<uint32_t>(i);
      if (c.result(i).ok()) {
        EXPECT_TRUE(sim_->Holds(b, keys[i])) << "block " << i << " OK but wrong bytes";
      } else {
        std::vector<std::byte> got(bb_);
        ASSERT_TRUE(setup_.engine->ReadBlock(b, got).ok());
        EXPECT_EQ(got, std::vector<std::byte>(bb_)) << "failed block " << i << " was written";
      }
    }
  }

  EngineSetup setup_;
  uint64_t bb_ = 0;
  std::shared_ptr<Tier> disk_;
  std::shared_ptr<ContainsFaults> faults_ = std::make_shared<ContainsFaults>();
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

// (a) A key whose Contains fails is a miss: not adopted, not an error of the
// lookup. Once the tier answers again, a later lookup adopts it.
TEST_F(RuntimeAdoptFaultTest, AKeyWhoseContainsFailsIsAMissUntilTheTierAnswers) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  ASSERT_NO_FATAL_FAILURE(StoreOnDisk(keys));
  ASSERT_NO_FATAL_FAILURE(Open());
  faults_->Fail(keys[0]);
  EXPECT_EQ(Hits(keys), 0u);
  EXPECT_EQ(rt_->Stats().adopted_blocks, 0u);

  faults_->Clear();
  faults_->Fail(keys[2]);
  auto found = rt_->Lookup(kTestNs, keys);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->hit_blocks, 2u);
  EXPECT_EQ(found->tier, (std::vector<uint8_t>{1, 1}));
  auto pinned = rt_->LookupAndPin(kTestNs, keys);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->result().hit_blocks, 2u);
  EXPECT_EQ(rt_->Stats().adopted_blocks, 2u) << "nothing at or past the failed key";
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys, 8);
  EXPECT_EQ(c.ok_count(), 2u);
  for (size_t i = 2; i < 4; ++i) EXPECT_EQ(c.result(i).code(), StatusCode::kNotFound) << i;
  ExpectNoWrongBytes(c, keys, 8);

  faults_->Clear();
  EXPECT_EQ(Hits(keys), 4u);
  EXPECT_EQ(rt_->Stats().adopted_blocks, 4u);
  sim_->Scrub(0, 64);
  c = sim_->Load(keys, 8);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(sim_->Holds(8 + i, keys[i])) << i;
}

// (b) A Contains that never answers costs a lookup the runtime's wait for
// it (kContainsWait, 50 ms), not a hang; each lookup asks again, and once
// the tier answers the blocks are adopted.
TEST_F(RuntimeAdoptFaultTest, AContainsThatNeverAnswersDelaysALookupOnlyBriefly) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  ASSERT_NO_FATAL_FAILURE(StoreOnDisk(keys));
  ASSERT_NO_FATAL_FAILURE(Open());
  faults_->Stall();
  for (int round = 0; round < 2; ++round) {
    size_t hits = 99;
    size_t pinned_hits = 99;
    const auto start = Clock::now();
    ASSERT_TRUE(ReturnsWithin(
        [&] {
          hits = Hits(keys);
          auto pinned = rt_->LookupAndPin(kTestNs, keys);
          pinned_hits = pinned.ok() ? pinned->result().hit_blocks : 99;
        },
        Scaled(milliseconds(5000)), "a lookup over a tier whose Contains never answers"));
    EXPECT_LT(Clock::now() - start, Scaled(milliseconds(500))) << round;
    EXPECT_EQ(hits, 0u) << round;
    EXPECT_EQ(pinned_hits, 0u) << round;
  }
  EXPECT_EQ(faults_->calls(), 4u);
  EXPECT_EQ(rt_->Stats().adopted_blocks, 0u);

  faults_->Clear();  // the held calls answer now, to no one
  EXPECT_EQ(rt_->Stats().adopted_blocks, 0u);
  EXPECT_EQ(Hits(keys), 4u);
  EXPECT_EQ(rt_->Stats().adopted_blocks, 4u);
}

// (b) A tier that answers every Contains batch just inside the wait must not
// hold a lookup for as many waits as the chain has batches: the wait bounds
// all of the tier's answers to one lookup. Batches of one key, 30 ms each:
// asking for all 24 would take 720 ms.
TEST_F(RuntimeAdoptFaultTest, ASlowContainsBoundsTheWholeLookupNotEachBatch) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 1; i <= 24; ++i) ids.push_back(i);
  const auto keys = ChainKeys(ids);
  ASSERT_NO_FATAL_FAILURE(StoreOnDisk(keys));
  FaultOptions f;
  f.latency = milliseconds(30);
  f.max_batch_blocks = 1;
  ASSERT_NO_FATAL_FAILURE(Open(f));
  size_t hits = 0;
  const auto start = Clock::now();
  ASSERT_TRUE(ReturnsWithin([&] { hits = Hits(keys); }, Scaled(milliseconds(5000)),
                            "a lookup over a slow Contains"));
  const auto waited = Clock::now() - start;
  EXPECT_LT(waited, Scaled(milliseconds(300)))
      << std::chrono::duration_cast<milliseconds>(waited).count() << " ms for " << hits
      << " keys adopted";
  EXPECT_LT(hits, keys.size());
  EXPECT_EQ(rt_->Stats().adopted_blocks, hits) << "only a leading run is adopted";
}

// (c) The tier said it holds the blocks, but reading them fails: each is a
// per-block error and no engine page is written. An I/O error is not a
// lost copy, so the index keeps the blocks and a later load may read them.
TEST_F(RuntimeAdoptFaultTest, AdoptedBlocksWhoseReadFailsAreErrorsNotData) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  FaultOptions f;
  f.fail_after_ops = 0;  // every read fails; nothing else passes the counter
  ASSERT_NO_FATAL_FAILURE(ExpectAdoptedLoadsFail(keys, f, StatusCode::kIOError));
  EXPECT_EQ(Hits(keys), 4u);
  EXPECT_EQ(disk_->Usage().blocks, 4u);
}

// (c) The tier finds the adopted blocks corrupt when read (its checksum):
// Corruption per block, no engine page written, and the copies are
// forgotten and removed from the tier, so no lookup offers them again.
TEST_F(RuntimeAdoptFaultTest, AdoptedBlocksTheTierFindsCorruptAreForgotten) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  FaultOptions f;
  f.fail_after_ops = 0;
  f.error = StatusCode::kCorruption;
  ASSERT_NO_FATAL_FAILURE(ExpectAdoptedLoadsFail(keys, f, StatusCode::kCorruption));
  EXPECT_EQ(Hits(keys), 0u);
  EXPECT_EQ(disk_->Usage().blocks, 0u) << "corrupt copies are removed from the tier";
  EXPECT_EQ(Hits(keys), 0u);
}

// (c) A read that returns fewer bytes than a block: the runtime finds it
// (byte count) and drops the copy as corrupt.
TEST_F(RuntimeAdoptFaultTest, AdoptedBlocksReadShortAreCorruption) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  FaultOptions f;
  f.truncate_on_read = true;
  ASSERT_NO_FATAL_FAILURE(ExpectAdoptedLoadsFail(keys, f, StatusCode::kCorruption));
  EXPECT_EQ(Hits(keys), 0u);
}

// (c) Contains reports a block the tier does not hold (a wrong index, or a
// block lost right after the answer): it is adopted, its load misses, and
// the index stops naming it; the blocks around it load.
TEST_F(RuntimeAdoptFaultTest, ABlockContainsReportedButTheTierLacksMissesOnLoad) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  ASSERT_NO_FATAL_FAILURE(StoreOnDisk({keys[0], keys[1], keys[3]}));
  ASSERT_NO_FATAL_FAILURE(Open());
  faults_->ReportPresent(keys[2]);
  ASSERT_EQ(Hits(keys), 4u);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys, 8);
  EXPECT_TRUE(c.result(0).ok());
  EXPECT_TRUE(c.result(1).ok());
  EXPECT_EQ(c.result(2).code(), StatusCode::kNotFound) << c.result(2).ToString();
  EXPECT_TRUE(c.result(3).ok());
  ExpectNoWrongBytes(c, keys, 8);
  faults_->Clear();
  EXPECT_EQ(Hits(keys), 2u) << "the missing block is still named";
}

// (d) The tier holds a chain with a hole: a block whose parent it lacks. The
// hit prefix stops at the hole and nothing past it is adopted; once the
// engine saves the missing block, the rest is adopted below it.
TEST_F(RuntimeAdoptFaultTest, AChainWithAHoleIsAdoptedUpToTheHole) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  ASSERT_NO_FATAL_FAILURE(StoreOnDisk({keys[0], keys[2], keys[3]}));
  ASSERT_NO_FATAL_FAILURE(Open());
  auto found = rt_->Lookup(kTestNs, keys);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->hit_blocks, 1u);
  EXPECT_EQ(found->tier, (std::vector<uint8_t>{1}));
  {
    auto pinned = rt_->LookupAndPin(kTestNs, keys);
    ASSERT_TRUE(pinned.ok());
    EXPECT_EQ(pinned->result().hit_blocks, 1u);
  }
  EXPECT_EQ(rt_->Stats().adopted_blocks, 1u);

  sim_->Prefill(keys, 0);
  ASSERT_TRUE(sim_->SaveFrom({keys[0], keys[1]}, 1, 0).status().ok());
  found = rt_->Lookup(kTestNs, keys);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->hit_blocks, 4u);
  EXPECT_EQ(found->tier, (std::vector<uint8_t>{1, 0, 1, 1}));
  EXPECT_EQ(rt_->Stats().adopted_blocks, 3u);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys, 8);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(sim_->Holds(8 + i, keys[i])) << i;
}

// (d) A hole at the root: the tier holds a chain's children but not its
// first block, so nothing is adopted.
TEST_F(RuntimeAdoptFaultTest, AChainWhoseRootTheTierLacksIsNotAdopted) {
  const auto keys = ChainKeys({1, 2, 3, 4});
  ASSERT_NO_FATAL_FAILURE(StoreOnDisk({keys[1], keys[2], keys[3]}));
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(Hits(keys), 0u);
  EXPECT_EQ(rt_->Stats().adopted_blocks, 0u);
}

}  // namespace
}  // namespace kvtier::testing
