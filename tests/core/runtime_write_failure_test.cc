// A tier below the hub whose writes keep failing (a server down, a store
// full of what it cannot evict): the hub must not fill with the parents
// that could not be written down while their children were.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/fault_tier.h"
#include "tests/support/recording_log.h"

namespace kvtier::testing {
namespace {

class RuntimeWriteFailureTest : public ::testing::Test {
 protected:
  // A hub of 4 blocks demoting down to 1 once above 2, over a 32-block tier
  // with `faults`: by default, writing the first `good_writes` blocks and
  // failing every later one.
  void Open(uint64_t good_writes) {
    FaultOptions faults;
    faults.fail_after_ops = good_writes;
    faults.error = StatusCode::kUnavailable;
    Open(faults);
  }
  void Open(const FaultOptions& faults) {
    setup_ = MakeEngine(64);
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 4);
    o.log = log_;
    o.tiers[0].watermarks = {.high = 0.5, .low = 0.25};
    o.tiers.push_back(LowerHostTier("below", bb, 32));
    o.tier_factory = FaultyTierFactory("below", faults);
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  size_t Hits(const std::vector<BlockKey>& keys) { return rt_->Lookup(kTestNs, keys)->hit_blocks; }

  std::shared_ptr<RecordingLog> log_ =
      std::make_shared<RecordingLog>(LogLevel::kWarning, "could not be written");
  EngineSetup setup_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

// A1..A4 are demoted leaf first: A4 reaches the tier below, then every
// write fails. A mover pass tries A3 and A2 twice (a fault that passes
// costs nothing) and keeps them; the next pass's try is their third, and
// they leave as links. The hub takes new saves again, and the engine's next
// save of A gives A2 and A3 their copies back.
TEST_F(RuntimeWriteFailureTest, ParentsThatCannotBeWrittenDownLeaveAfterThreeTries) {
  ASSERT_NO_FATAL_FAILURE(Open(1));
  const auto a = ChainKeys({1, 2, 3, 4});
  sim_->Prefill(a, 0);
  ASSERT_TRUE(sim_->SaveFrom(a, 0, 0).status().ok());
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 3u);
  EXPECT_EQ(rt_->Stats().tiers[0].rejected_blocks, 4u);
  EXPECT_EQ(Hits(a), 4u) << "kept while the write may yet succeed";
  // The operator hears of it once, not once per failed write.
  EXPECT_EQ(log_->lines(),
            std::vector<std::string>{"tier 'below': 2 blocks could not be written to it (each "
                                     "stays in the tier above, or is lost): unavailable: "
                                     "injected fault in tier 'below'"});

  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 1u);
  EXPECT_EQ(rt_->Stats().tiers[0].evicted_blocks, 3u);  // A4 was, when written down
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 1u) << "A4 stays below";
  EXPECT_EQ(Hits(a), 1u) << "A2 is a link now";

  // Room for a new chain of three: before, A2 and A3 held it for good.
  const auto b = ChainKeys({11, 12, 13});
  sim_->Prefill(b, 8);
  ASSERT_TRUE(sim_->SaveFrom(b, 0, 8).status().ok());
  EXPECT_EQ(Hits(b), 3u);

  // The engine recomputes A2 and A3 and saves them: A4 is reachable again.
  ASSERT_TRUE(rt_->Remove(kTestNs, b).ok());
  sim_->Prefill(a, 16);
  ASSERT_TRUE(sim_->SaveFrom(a, 1, 16).status().ok());
  EXPECT_EQ(rt_->Lookup(kTestNs, a)->tier, (std::vector<uint8_t>{0, 0, 0, 1}));
  // (The tier below fails its reads too: A1..A3 are loaded from the hub.)
  const std::vector<BlockKey> head(a.begin(), a.begin() + 3);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(head, 32);
  ASSERT_TRUE(c.status().ok()) << c.status().ToString();
  for (uint32_t i = 0; i < head.size(); ++i) EXPECT_TRUE(sim_->Holds(32 + i, a[i])) << i;
}

// A tier that fails its writes only after a second (a Redis server that
// stopped answering: its time out is Unavailable, not DeadlineExceeded).
// After one such write the mover writes nothing to it for a second: a save
// that needs room drops a hub leaf at once, where it used to write it to
// the tier and give up waiting, failing.
TEST_F(RuntimeWriteFailureTest, AWriteThatFailsSlowlyStopsWritesToTheTierForASecond) {
  FaultOptions faults;
  faults.error_rate = 1.0;
  faults.error = StatusCode::kUnavailable;
  faults.latency = std::chrono::milliseconds(1100);
  ASSERT_NO_FATAL_FAILURE(Open(faults));
  const auto a = ChainKeys({1, 2, 3});
  sim_->Prefill(a, 0);
  ASSERT_TRUE(sim_->SaveFrom(a, 0, 0).status().ok());
  ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());  // A3 and A2 fail, a second later
  ASSERT_EQ(rt_->Stats().tiers[0].blocks, 1u);
  const uint64_t errors = rt_->Stats().tiers[1].errors;
  ASSERT_GT(errors, 0u);

  const auto b = ChainKeys({10, 11, 12});
  sim_->Prefill(b, 10);
  ASSERT_TRUE(sim_->SaveFrom(b, 0, 10).status().ok());
  const auto c = ChainKeys({20});
  sim_->Prefill(c, 20);
  Completion saved = sim_->SaveFrom(c, 0, 20);
  EXPECT_TRUE(saved.status().ok()) << saved.status().ToString();
  EXPECT_EQ(Hits(c), 1u);
  EXPECT_EQ(Hits(a), 0u) << "A1 left the hub unwritten";
  EXPECT_EQ(rt_->Stats().tiers[1].errors, errors) << "a write was sent to the tier";
}

}  // namespace
}  // namespace kvtier::testing
