// Faults below the hub: the engine gets a miss or a per-block error, never
// wrong bytes, and nothing waits past its deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/runtime_impl.h"
#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/fault_tier.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;

class RuntimeFaultTest : public ::testing::Test {
 protected:
  // Hub of 4 blocks over a 32-block lower tier wrapped with `faults`.
  void Open(FaultOptions faults, uint32_t workers = 2, uint32_t queue = 1024,
            uint32_t batch_blocks = 64) {
    setup_ = MakeEngine(64);
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 4);
    o.worker_threads = workers;
    o.max_queued_requests = queue;
    o.mover.batch_blocks = batch_blocks;
    o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
    o.tiers.push_back(LowerHostTier("faulty", bb, 32));
    o.tier_factory = FaultyTierFactory("faulty", faults);
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
  }
  // Saves a 4-block chain and pushes all of it to the lower tier.
  std::vector<BlockKey> SaveAndDemote(uint64_t base) {
    auto keys = ChainKeys({base, base + 1, base + 2, base + 3});
    sim_->Prefill(keys, 0);
    EXPECT_TRUE(sim_->SaveFrom(keys, 0, 0).status().ok());
    auto moved = rt_->TEST_RunMoverOnce();
    EXPECT_TRUE(moved.ok());
    return keys;
  }
  // Saves B = {20, 21, 22} from engine blocks 10..12: with A1 of
  // SaveAndDemote, the hub of 4 is full.
  std::vector<BlockKey> FillHub() {
    auto b = ChainKeys({20, 21, 22});
    sim_->Prefill(b, 10);
    EXPECT_TRUE(sim_->SaveFrom(b, 0, 10).status().ok());
    return b;
  }
  // Opens; A1..A4 saved with A2..A4 below (*a), then B fills the hub and
  // another request pins it (*pinned); the engine pool scrubbed.
  void PinAFullHub(std::vector<BlockKey>* a, Result<PinnedPrefix>* pinned) {
    Open(FaultOptions{});
    *a = SaveAndDemote(1);
    auto b = FillHub();
    *pinned = rt_->LookupAndPin(kTestNs, b);
    ASSERT_TRUE(pinned->ok());
    ASSERT_EQ((*pinned)->hit_blocks(), 3u);  // the hub is full and pinned
    sim_->Scrub(0, 64);
  }
  // No engine block may ever hold bytes of a key other than the one asked.
  void ExpectNoWrongBytes(const Completion& c, const std::vector<BlockKey>& keys, uint32_t first) {
    for (size_t i = 0; i < keys.size(); ++i) {
      uint32_t b = first + static_cast<uint32_t>(i);
      if (c.result(i).ok()) {
        EXPECT_TRUE(sim_->Holds(b, keys[i])) << "block " << i << " OK but wrong bytes";
      } else {
        std::vector<std::byte> got(setup_.layout.BlockBytes());
        ASSERT_TRUE(setup_.engine->ReadBlock(b, got).ok());
        EXPECT_EQ(got, std::vector<std::byte>(got.size()))
            << "failed block " << i << " was written";
      }
    }
  }

  // A 4-block chain on a lower tier that corrupts every read, whose second
  // block was then read: it failed its check, lost its only copy and stays
  // in the index as a link, since its children are still stored.
  std::vector<BlockKey> LinkWithNoCopy() {
    FaultOptions f;
    f.corrupt_on_read = true;
    Open(f);
    auto keys = SaveAndDemote(1);
    Completion c = sim_->Load(std::vector<BlockKey>(keys.begin(), keys.begin() + 2), 8);
    EXPECT_EQ(c.result(1).code(), StatusCode::kCorruption);
    EXPECT_EQ(rt_->Lookup(kTestNs, keys)->hit_blocks, 1u);
    return keys;
  }

  EngineSetup setup_;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
};

TEST_F(RuntimeFaultTest, CorruptReadsAreCorruptionNeverData) {
  FaultOptions f;
  f.corrupt_on_read = true;
  Open(f);
  auto keys = SaveAndDemote(1);
  auto before = rt_->Lookup(kTestNs, keys);
  ASSERT_EQ(before->hit_blocks, 4u);
  // Low mark 1 of 4: leaves first, so the root stays in the hub.
  ASSERT_EQ(before->tier, (std::vector<uint8_t>{0, 1, 1, 1}));
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys, 8);
  size_t corrupt = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    corrupt += c.result(i).code() == StatusCode::kCorruption ? 1 : 0;
  }
  EXPECT_TRUE(c.result(0).ok());
  EXPECT_EQ(corrupt, 3u);
  ExpectNoWrongBytes(c, keys, 8);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.tiers[1].corruptions, corrupt);
  EXPECT_EQ(st.tiers[1].blocks, 0u) << "corrupt copies are removed from the tier";
  EXPECT_EQ(rt_->Lookup(kTestNs, keys)->hit_blocks, 1u) << "corrupt copies are forgotten";
}

// A Corruption the tier reports itself is counted once, by the tier; the
// runtime counts only what it finds (byte count, checksum).
TEST_F(RuntimeFaultTest, CorruptionTheTierReportsIsCountedOnce) {
  FaultOptions f;
  f.fail_after_ops = 3;  // the three demotion writes pass, every read fails
  f.error = StatusCode::kCorruption;
  Open(f);
  auto keys = SaveAndDemote(1);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys, 8);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(c.result(i).code(), StatusCode::kCorruption) << i;
  ExpectNoWrongBytes(c, keys, 8);
  EXPECT_EQ(rt_->Stats().tiers[1].corruptions, 3u);
}

// A corrupt parent whose children are still stored below stays in the index
// as a link with no copy. Removing it with its children must not touch it
// after erasing its last child has erased it too (ASan saw that).
TEST_F(RuntimeFaultTest, RemovingAChainThroughALinkWithNoCopyKeepsTheIndexSound) {
  const std::vector<BlockKey> keys = LinkWithNoCopy();
  const std::vector<BlockKey> tail(keys.begin() + 1, keys.end());
  ASSERT_TRUE(rt_->Remove(kTestNs, tail).ok());
  EXPECT_EQ(rt_->Lookup(kTestNs, keys)->hit_blocks, 1u);
  EXPECT_EQ(rt_->Stats().tiers[1].blocks, 0u);
  // The chain can be saved again under the same root.
  sim_->Prefill(keys, 16);
  ASSERT_TRUE(sim_->SaveFrom(keys, 0, 16).status().ok());
  EXPECT_EQ(rt_->Lookup(kTestNs, keys)->hit_blocks, 4u);
  ASSERT_TRUE(rt_->Remove(kTestNs, keys).ok());
  EXPECT_EQ(rt_->Lookup(kTestNs, keys)->hit_blocks, 0u);
}

// The same link is filled again by the next save of the chain: the engine
// recomputes the corrupt block, saves it, and the whole prefix hits again.
TEST_F(RuntimeFaultTest, ASaveGivesALinkWithNoCopyItsCopyBack) {
  const std::vector<BlockKey> keys = LinkWithNoCopy();
  sim_->Prefill(keys, 16);
  ASSERT_TRUE(sim_->SaveFrom(keys, 0, 16).status().ok());
  auto after = rt_->Lookup(kTestNs, keys);
  EXPECT_EQ(after->hit_blocks, 4u);
  EXPECT_EQ(after->tier, (std::vector<uint8_t>{0, 0, 1, 1}));
}

TEST_F(RuntimeFaultTest, TruncatedReadsAreCorruption) {
  FaultOptions f;
  f.truncate_on_read = true;
  Open(f);
  auto keys = SaveAndDemote(1);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys, 8);
  EXPECT_TRUE(c.result(0).ok()) << "the root never left the hub";
  EXPECT_EQ(c.result(1).code(), StatusCode::kCorruption) << c.result(1).ToString();
  ExpectNoWrongBytes(c, keys, 8);
}

TEST_F(RuntimeFaultTest, ReadErrorsArePerBlockErrors) {
  FaultOptions f;
  f.fail_after_ops = 3;  // the three demotion writes pass, every read fails
  Open(f);
  auto keys = SaveAndDemote(1);
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(keys, 8);
  EXPECT_TRUE(c.result(0).ok());
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(c.result(i).code(), StatusCode::kIOError) << i;
  // Blocks that failed before the copy are not waited for: the layers of
  // the one copied block are reported, and the failed blocks' pages are
  // left alone (ExpectNoWrongBytes checks they are still zero).
  EXPECT_EQ(c.layers_done(), setup_.layout.num_layers);
  ExpectNoWrongBytes(c, keys, 8);
  EXPECT_EQ(rt_->Stats().load_failures, 3u);
}

TEST_F(RuntimeFaultTest, FailedDemotionLosesBlocksButNeverServesWrongOnes) {
  FaultOptions f;
  f.error_rate = 1.0;  // nothing reaches the lower tier
  Open(f);
  auto keys = SaveAndDemote(1);
  auto r = rt_->Lookup(kTestNs, keys);
  EXPECT_EQ(r->hit_blocks, 1u) << "only the root is left in the hub";
  sim_->Scrub(0, 64);
  Completion c = sim_->Load(std::vector<BlockKey>(keys.begin(), keys.begin() + 1), 8);
  EXPECT_TRUE(c.result(0).ok());
  EXPECT_TRUE(sim_->Holds(8, keys[0]));
}

TEST_F(RuntimeFaultTest, SlowTierMissesTheDeadlineWithoutHanging) {
  FaultOptions f;
  f.latency = std::chrono::milliseconds(400);
  Open(f);
  auto keys = SaveAndDemote(1);
  sim_->Scrub(0, 64);
  auto start = Clock::now();
  Completion c = sim_->Load(keys, 8, std::chrono::milliseconds(50));
  auto waited = Clock::now() - start;
  EXPECT_LT(waited, Scaled(std::chrono::milliseconds(350))) << "load waited for the slow tier";
  size_t late = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    late += c.result(i).code() == StatusCode::kDeadlineExceeded ? 1 : 0;
  }
  // K1 is in the hub (SaveAndDemote): only the three below are late.
  EXPECT_EQ(late, 3u);
  EXPECT_TRUE(c.result(0).ok()) << c.result(0).ToString();
  EXPECT_TRUE(sim_->Holds(8, keys[0]));
  ExpectNoWrongBytes(c, keys, 8);
  rt_->Shutdown();  // waits for the late reads to release their slots
}

// A load into a full hub makes room by writing hub blocks down, one batch at
// a time; past its deadline it starts no further batch and waits for none.
// Here each batch is one block and takes the tier's 300 ms: room for 3
// blocks would take 900 ms, and the load, due in 200 ms, ends then, the
// first write going on without it (a tier that never answers:
// RuntimeHungTierTest).
TEST_F(RuntimeFaultTest, MakingRoomForALoadStopsAtItsDeadline) {
  FaultOptions f;
  f.latency = std::chrono::milliseconds(300);
  Open(f, /*workers=*/2, /*queue=*/1024, /*batch_blocks=*/1);
  auto a = SaveAndDemote(1);  // A1 in the hub, A2..A4 below
  auto b = FillHub();
  ASSERT_EQ(rt_->Lookup(kTestNs, b)->hit_blocks, 3u);  // the hub is full
  sim_->Scrub(0, 64);
  const auto start = Clock::now();
  Completion c = sim_->Load(a, 30, std::chrono::milliseconds(200));
  const auto waited = Clock::now() - start;
  EXPECT_LT(waited, Scaled(std::chrono::milliseconds(750))) << "room was made past the deadline";
  EXPECT_EQ(c.result(0).code(), StatusCode::kOk);
  // The blocks below get no room in time: past the deadline (this said
  // ResourceExhausted, as if nothing could ever leave).
  for (size_t i = 1; i < a.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kDeadlineExceeded)
        << i << ": " << c.result(i).ToString();
  }
  ExpectNoWrongBytes(c, a, 30);
  rt_->Shutdown();
}

// A hub full of blocks another request has pinned: a load waits for the pin
// to end (pins last milliseconds in a working engine) instead of failing its
// blocks at once; held past the load's deadline, they fail DeadlineExceeded,
// and with no deadline the wait for pins ends after a second, as a full hub.
TEST_F(RuntimeFaultTest, ALoadWaitsForAnotherRequestsPinsToEnd) {
  std::vector<BlockKey> a;
  Result<PinnedPrefix> pinned = PinnedPrefix();
  ASSERT_NO_FATAL_FAILURE(PinAFullHub(&a, &pinned));

  auto start = Clock::now();
  Completion c = sim_->Load(a, 30, std::chrono::milliseconds(300));
  EXPECT_LT(Clock::now() - start, Scaled(std::chrono::milliseconds(900)));
  for (size_t i = 1; i < a.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kDeadlineExceeded)
        << i << ": " << c.result(i).ToString();
  }
  ExpectNoWrongBytes(c, a, 30);

  sim_->Scrub(0, 64);
  start = Clock::now();
  const std::vector<uint32_t> dst = {30, 31, 32, 33};
  c = rt_->Load(kTestNs, a, dst, std::chrono::nanoseconds::max());
  (void)c.Wait();
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(900)) << "gave up while the pin might still end";
  EXPECT_LT(waited, Scaled(std::chrono::milliseconds(2500)));
  for (size_t i = 1; i < a.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kResourceExhausted)
        << i << ": " << c.result(i).ToString();
  }
  ExpectNoWrongBytes(c, a, 30);

  // The pin ends 100 ms into the load: every block loads.
  sim_->Scrub(0, 64);
  std::thread unpin([&pinned] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pinned = PinnedPrefix();
  });
  c = sim_->Load(a, 30, std::chrono::seconds(5));
  unpin.join();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kOk) << i << ": " << c.result(i).ToString();
  }
  ExpectNoWrongBytes(c, a, 30);
  rt_->Shutdown();
}

// A pin that ends after the load's eviction found nothing to take, before
// it looks at who pins the hub, is not missed: with nobody's pin left the
// load would otherwise give up on room it can now make.
TEST_F(RuntimeFaultTest, APinEndingBetweenTheEvictionAndTheWaitIsNotMissed) {
  std::vector<BlockKey> a;
  Result<PinnedPrefix> pinned = PinnedPrefix();
  ASSERT_NO_FATAL_FAILURE(PinAFullHub(&a, &pinned));
  int tries = 0;
  static_cast<internal::RuntimeImpl*>(rt_.get())->TEST_SetAfterHubRoomTry([&] {
    if (++tries == 1) pinned = PinnedPrefix();
  });
  const auto start = Clock::now();
  Completion c = sim_->Load(a, 30, std::chrono::seconds(5));
  EXPECT_LT(Clock::now() - start, Scaled(std::chrono::milliseconds(500)));
  EXPECT_EQ(tries, 1);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kOk) << i << ": " << c.result(i).ToString();
  }
  ExpectNoWrongBytes(c, a, 30);
  rt_->Shutdown();
}

// Room nobody else can free is not waited for: a load whose hub is full of
// its own request's pinned blocks, or that needs more blocks than the hub
// has, fails its blocks ResourceExhausted at once, as before loads waited
// for pins (waiting a second each made a replay over a small hub 14-430
// times slower).
TEST_F(RuntimeFaultTest, ALoadDoesNotWaitForRoomOnlyItsOwnRequestHolds) {
  Open(FaultOptions{});
  auto a = SaveAndDemote(1);  // A1 in the hub, A2..A4 below
  auto b = FillHub();
  std::vector<BlockKey> keys = b;
  keys.insert(keys.end(), a.begin(), a.end());
  auto pinned = rt_->LookupAndPin(kTestNs, b);  // the same request's pins
  ASSERT_TRUE(pinned.ok());
  sim_->Scrub(0, 64);
  auto start = Clock::now();
  Completion c = sim_->Load(keys, 30, std::chrono::seconds(5));
  EXPECT_LT(Clock::now() - start, Scaled(std::chrono::milliseconds(500)));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), i < 4 ? StatusCode::kOk : StatusCode::kResourceExhausted)
        << i << ": " << c.result(i).ToString();
  }
  ExpectNoWrongBytes(c, keys, 30);
  pinned = PinnedPrefix();

  // Eight blocks below a hub of four, with another request's pin held.
  auto d = SaveAndDemote(40);
  auto other = rt_->LookupAndPin(kTestNs, b);
  ASSERT_TRUE(other.ok());
  keys = a;
  keys.insert(keys.end(), d.begin(), d.end());
  sim_->Scrub(0, 64);
  start = Clock::now();
  c = sim_->Load(keys, 30, std::chrono::seconds(5));
  EXPECT_LT(Clock::now() - start, Scaled(std::chrono::milliseconds(500)));
  size_t exhausted = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    exhausted += c.result(i).code() == StatusCode::kResourceExhausted;
  }
  EXPECT_GT(exhausted, 0u);
  ExpectNoWrongBytes(c, keys, 30);
  rt_->Shutdown();
}

// The request's own pins reach past the keys a load names: the chain above
// them and what hangs below them (a hybrid model's state parts, loaded by a
// load of the parts alone). A load of A2..A4 whose request pinned A1..A7,
// with A5..A7 filling the hub, is not another request waiting to let go: it
// fails at once instead of waiting a second for itself.
TEST_F(RuntimeFaultTest, ALoadOfPartOfItsPinnedChainDoesNotWaitForItself) {
  Open(FaultOptions{});
  auto a = SaveAndDemote(1);  // A1 in the hub, A2..A4 below
  auto all = ChainKeys({1, 2, 3, 4, 5, 6, 7});
  sim_->Prefill(all, 0);
  ASSERT_TRUE(sim_->SaveFrom(all, 4, 0).status().ok());  // A5..A7 into the hub
  auto pinned = rt_->LookupAndPin(kTestNs, all);
  ASSERT_TRUE(pinned.ok());
  ASSERT_EQ(pinned->hit_blocks(), 7u);
  const std::vector<BlockKey> middle(a.begin() + 1, a.end());
  sim_->Scrub(0, 64);
  const auto start = Clock::now();
  Completion c = sim_->Load(middle, 30, std::chrono::seconds(5));
  EXPECT_LT(Clock::now() - start, Scaled(std::chrono::milliseconds(500)));
  for (size_t i = 0; i < middle.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kResourceExhausted)
        << i << ": " << c.result(i).ToString();
  }
  ExpectNoWrongBytes(c, middle, 30);
  rt_->Shutdown();
}

// One load at a time waits for other requests' pins: while it waits, a
// second load needing room fails at once instead of holding a worker for
// the same second, and the first still loads once the pin ends.
TEST_F(RuntimeFaultTest, OnlyOneLoadWaitsForOthersPins) {
  std::vector<BlockKey> a;
  Result<PinnedPrefix> pinned = PinnedPrefix();
  ASSERT_NO_FATAL_FAILURE(PinAFullHub(&a, &pinned));
  const auto start = Clock::now();
  const std::vector<uint32_t> first_dst = {30, 31, 32, 33};
  Completion first = rt_->Load(kTestNs, a, first_dst, std::chrono::seconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ASSERT_FALSE(first.Poll()) << "the first load did not wait";

  const auto second_start = Clock::now();
  const std::vector<uint32_t> second_dst = {40, 41, 42, 43};
  Completion second = rt_->Load(kTestNs, a, second_dst, std::chrono::seconds(5));
  (void)second.Wait();
  EXPECT_LT(Clock::now() - second_start, Scaled(std::chrono::milliseconds(400)));
  EXPECT_EQ(second.result(0).code(), StatusCode::kOk);
  for (size_t i = 1; i < a.size(); ++i) {
    EXPECT_EQ(second.result(i).code(), StatusCode::kResourceExhausted)
        << i << ": " << second.result(i).ToString();
  }
  ExpectNoWrongBytes(second, a, 40);

  pinned = PinnedPrefix();
  (void)first.Wait();
  EXPECT_LT(Clock::now() - start, Scaled(std::chrono::milliseconds(900)));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(first.result(i).code(), StatusCode::kOk) << i << ": " << first.result(i).ToString();
  }
  ExpectNoWrongBytes(first, a, 30);
  rt_->Shutdown();
}

TEST_F(RuntimeFaultTest, FullQueueAnswersBusy) {
  FaultOptions f;
  f.latency = std::chrono::milliseconds(100);
  Open(f, /*workers=*/1, /*queue=*/1);
  auto keys = SaveAndDemote(1);
  std::vector<Completion> loads;
  size_t busy = 0;
  // The first load occupies the only worker for the tier's 100 ms and the
  // next fills the one queue place (or, if the worker has not picked the
  // first up yet, the first holds it): the rest are refused at once.
  for (uint32_t i = 0; i < 6; ++i) {
    std::vector<uint32_t> b = {10 + i};
    Completion c =
        rt_->Load(kTestNs, std::span(keys).subspan(1 + i % 3, 1), b, std::chrono::seconds(5));
    if (c.Poll() && c.status().code() == StatusCode::kBusy) ++busy;
    loads.push_back(c);
  }
  EXPECT_GE(busy, 4u);
  EXPECT_LE(busy, 5u);
  EXPECT_EQ(rt_->Stats().busy_rejections, busy);
  for (auto& c : loads) (void)c.Wait();
}

}  // namespace
}  // namespace kvtier::testing
