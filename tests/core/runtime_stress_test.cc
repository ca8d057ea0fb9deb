// Many engine threads against one runtime with a small hub and a lower tier:
// saves, lookups, pinned loads and removals interleave while the mover
// demotes. Every block a load reports OK must hold exactly its own bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <random>
#include <thread>

#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {
namespace {

// Runs the engines against a runtime whose options `configure` adjusts.
void Stress(const std::function<void(RuntimeOptions&)>& configure) {
  constexpr uint32_t kThreads = 4;
  constexpr uint32_t kBlocksPerThread = 16;  // each thread owns a slice of the pool
  constexpr int kSteps = 150;
  EngineSetup setup = MakeEngine(kThreads * kBlocksPerThread);
  const uint64_t bb = setup.layout.BlockBytes();
  RuntimeOptions o = MakeOptions(bb, 24, /*mover_thread=*/true);
  o.tiers[0].watermarks = {.high = 0.7, .low = 0.4};
  o.tiers.push_back(LowerHostTier("lower", bb, 48));
  o.mover.interval_ms = 1;
  configure(o);
  auto opened = Runtime::Open(o, setup.engine);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Runtime> rt = std::move(opened).value();

  std::atomic<int> wrong{0}, hits{0}, unexpected{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      SimEngine sim(rt.get(), setup.engine.get());
      std::mt19937 rng(t + 1);
      const uint32_t base = t * kBlocksPerThread;
      for (int step = 0; step < kSteps; ++step) {
        // Requests share prefixes across threads: a few roots, short chains.
        std::vector<uint64_t> ids = {rng() % 4};
        size_t len = 1 + rng() % 6;
        for (size_t i = 1; i < len; ++i) ids.push_back(ids.back() * 10 + rng() % 3 + 1);
        auto keys = ChainKeys(ids);
        auto pin = rt->LookupAndPin(kTestNs, keys);
        if (!pin.ok()) {
          unexpected.fetch_add(1);
          continue;
        }
        size_t n = pin->hit_blocks();
        sim.Scrub(base, static_cast<uint32_t>(keys.size()));
        Completion c = sim.Load(std::vector<BlockKey>(keys.begin(), keys.begin() + n), base);
        size_t ok = 0;
        while (ok < n && c.result(ok).ok()) {
          if (!sim.Holds(base + static_cast<uint32_t>(ok), keys[ok])) wrong.fetch_add(1);
          ++ok;
        }
        for (size_t i = ok; i < n; ++i) {
          StatusCode code = c.result(i).code();
          if (code != StatusCode::kOk && code != StatusCode::kResourceExhausted) {
            unexpected.fetch_add(1);
          }
        }
        hits.fetch_add(static_cast<int>(ok));
        std::vector<BlockKey> rest(keys.begin() + ok, keys.end());
        sim.Prefill(rest, base + static_cast<uint32_t>(ok));
        Completion s = sim.SaveFrom(keys, ok, base);
        for (size_t i = 0; i < s.size(); ++i) {
          StatusCode code = s.result(i).code();
          if (code != StatusCode::kOk && code != StatusCode::kResourceExhausted) {
            unexpected.fetch_add(1);
          }
        }
        pin = PinnedPrefix();
        if (step % 37 == 0) (void)rt->Remove(kTestNs, std::span(keys).last(1));
      }
    });
  }
  for (auto& th : threads) th.join();
  rt->Shutdown();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(hits.load(), 0);
  RuntimeStats st = rt->Stats();
  EXPECT_GT(st.tiers[0].demoted_blocks, 0u) << "the mover ran";
  EXPECT_LE(st.tiers[0].blocks, 24u);
}

TEST(RuntimeStress, ConcurrentEnginesNeverSeeWrongBytes) {
  Stress([](RuntimeOptions&) {});
}

// The same with policies that keep state and choose their own victims:
// s3fifo and flop_aware orders, frequency, cost and marconi admission, on
// the hub and below. Children must still leave before parents (the index
// aborts otherwise) and loads must still get exactly their bytes.
TEST(RuntimeStress, PoliciesNeverBreakTheChainsOrTheBytes) {
  Stress([](RuntimeOptions& o) {
    o.block_tokens = 8;
    o.gpu_flops_per_s = 1e12;
    o.tiers[0].eviction = "s3fifo";
    o.tiers[1].eviction = "flop_aware";
    o.tiers[1].admission = {"frequency", "cost"};
    o.tiers[1].read_bytes_per_s = 1e9;
  });
  Stress([](RuntimeOptions& o) {
    o.tiers[0].eviction = "flop_aware";
    o.tiers[0].admission = {"marconi"};
    o.tiers[1].eviction = "s3fifo";
    o.tiers[1].admission = {"frequency"};
  });
}

}  // namespace
}  // namespace kvtier::testing
