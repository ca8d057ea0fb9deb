// The sweep's cache keeps the leaf-first rule; the engine model's GPU
// watermark trades preemptions for queueing.
#include "tools/bench/sweep.h"

#include <gtest/gtest.h>

#include "tools/bench/sweep_cache.h"

namespace kvtier::bench {
namespace {

std::array<SimTierConfig, kSimTiers> Tiers(uint64_t host, uint64_t nvme) {
  std::array<SimTierConfig, kSimTiers> t;
  t[0].capacity_blocks = host;
  t[1].capacity_blocks = nvme;
  for (auto& c : t) {
    auto lru = CreateEvictionPolicy("lru", {});
    c.eviction = std::move(lru).value();
  }
  std::vector<std::string> always = {"always"};
  auto chain = AdmissionChain::Create(always, {});
  t[1].admission = std::move(chain).value();
  return t;
}

std::vector<SimBlock> Chain(std::vector<uint64_t> ids) {
  std::vector<SimBlock> c;
  for (uint64_t id : ids) c.push_back({id, 512, 1.0, UINT64_MAX});
  return c;
}

TEST(SweepCacheTest, EvictsLeavesBeforeOlderParents) {
  TieredCache cache(Tiers(4, 0), 100, 1e15, 1);
  std::vector<uint8_t> tiers;
  cache.Use(Chain({1, 2, 3}), 0, 1);
  cache.Use(Chain({4, 5}), 0, 2);
  // 1 is the least recent block, but 3 is the only leaf that may go.
  EXPECT_EQ(cache.Lookup(Chain({1, 2, 3}), &tiers), 2u);
  EXPECT_EQ(cache.Lookup(Chain({4, 5}), &tiers), 2u);
  EXPECT_EQ(cache.counters(0).evicted, 1u);
}

TEST(SweepCacheTest, DemotesChildrenFirstAndReadsThroughTheHub) {
  TieredCache cache(Tiers(3, 3), 100, 1e15, 1);
  std::vector<uint8_t> tiers;
  cache.Use(Chain({1, 2, 3}), 0, 1);
  cache.Use(Chain({4, 5}), 0, 2);
  ASSERT_EQ(cache.Lookup(Chain({1, 2, 3}), &tiers), 3u);
  EXPECT_EQ(tiers, (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(cache.counters(1).blocks_written, 2u);
  EXPECT_EQ(cache.counters(1).bytes_written, 200u);
  EXPECT_EQ(cache.blocks_in(1), 2u);
}

// A block its NVMe admission refuses is written down only while a child on
// NVMe needs it: once making room there evicted that child, it is refused
// (it used to be written, and counted as forced, all the same).
TEST(SweepCacheTest, ARefusedParentIsNotForcedOnceItsNvmeChildLeft) {
  auto tiers = Tiers(2, 1);
  std::vector<std::string> cost = {"cost"};
  tiers[1].admission = std::move(AdmissionChain::Create(cost, {})).value();
  tiers[1].read_bytes_per_s = 1e9;  // 100 bytes: 0.1 us to load
  TieredCache cache(std::move(tiers), 100, 1e15, 1);
  // Block 1 costs 1 FLOP (recomputed faster than loaded: refused); the
  // others 1e12 (1 ms: admitted).
  auto block = [](uint64_t id) { return SimBlock{id, 512, id == 1 ? 1.0 : 1e12, UINT64_MAX}; };
  const std::vector<SimBlock> a = {block(1), block(2)};
  cache.Use(a, 0, 1);
  cache.Use(std::vector<SimBlock>{block(3)}, 0, 2);  // 2 goes down: NVMe {2}, hub {1, 3}
  ASSERT_EQ(cache.counters(1).blocks_written, 1u);
  cache.Use(std::vector<SimBlock>{block(4)}, 0, 3);  // 1 leaves the hub; NVMe drops 2 for it
  std::vector<uint8_t> tier_of;
  EXPECT_EQ(cache.Lookup(a, &tier_of), 0u) << "the refused block was stored";
  EXPECT_EQ(cache.counters(1).blocks_written, 1u);
  EXPECT_EQ(cache.counters(1).forced_writes, 0u);
}

// Request observations and finishes reach the hub's `reuse` eviction: once
// one request has finished, the blocks of a request still decoding stay and
// the finished one's leaf leaves, where LRU drops the older unfinished leaf.
TEST(SweepCacheTest, FinishesReachTheReuseEviction) {
  for (const char* eviction : {"reuse", "lru"}) {
    auto tiers = Tiers(3, 0);
    tiers[0].eviction = std::move(CreateEvictionPolicy(eviction, {})).value();
    TieredCache cache(std::move(tiers), 100, 1e15, 1);
    const std::vector<uint64_t> a = {1, 2}, b = {3}, c = {4};
    cache.ObserveRequest(a, 2, {}, 1);
    cache.Use(Chain(a), 0, 1);
    cache.ObserveRequest(b, 1, {}, 2);
    cache.Use(Chain(b), 0, 2);
    cache.ObserveFinish(b, 5, 3);  // b has finished decoding, a has not
    cache.ObserveRequest(c, 1, {}, 4);
    cache.Use(Chain(c), 0, 4);
    std::vector<uint8_t> found;
    const bool reuse = std::string(eviction) == "reuse";
    EXPECT_EQ(cache.Lookup(Chain(a), &found), reuse ? 2u : 1u) << eviction;
    EXPECT_EQ(cache.Lookup(Chain(b), &found), reuse ? 0u : 1u) << eviction;
    EXPECT_EQ(cache.counters(0).evicted, 1u) << eviction;
  }
}

// A hub copy of a block the NVMe tier holds is what the `reuse` hub order
// drops first: that costs no write, and the next use still finds the block
// (in NVMe). LRU drops the least recent leaf instead, which must be written
// down, pushing the backed block's NVMe copy out.
TEST(SweepCacheTest, ReuseHubDropsCopiesTheLowerTierHolds) {
  for (const char* eviction : {"reuse", "lru"}) {
    auto tiers = Tiers(2, 1);
    tiers[0].eviction = std::move(CreateEvictionPolicy(eviction, {})).value();
    TieredCache cache(std::move(tiers), 100, 1e15, 1);
    std::vector<uint8_t> found;
    cache.Use(Chain({1}), 0, 1);
    cache.Use(Chain({2}), 0, 2);
    cache.Use(Chain({3}), 0, 3);  // 1 goes down to NVMe
    ASSERT_EQ(cache.Lookup(Chain({1}), &found), 1u);
    ASSERT_EQ(found, (std::vector<uint8_t>{1}));
    cache.Use(Chain({1}), 1, 4);  // read through the hub: 2 leaves (NVMe is full)
    cache.Use(Chain({4}), 0, 5);  // the hub holds 3 and 1, which NVMe backs
    const bool reuse = std::string(eviction) == "reuse";
    const uint8_t hub = 0, nvme = 1;
    ASSERT_EQ(cache.Lookup(Chain({3}), &found), 1u) << eviction;
    EXPECT_EQ(found[0], reuse ? hub : nvme) << eviction;
    ASSERT_EQ(cache.Lookup(Chain({1}), &found), 1u) << eviction;
    EXPECT_EQ(found[0], reuse ? nvme : hub) << eviction;
    EXPECT_EQ(cache.counters(1).blocks_written, reuse ? 1u : 2u) << eviction;
  }
}

TEST(SweepEngineTest, GpuWatermarkCutsPreemptionsAndRecompute) {
  auto trace = ReadMooncakeTrace(std::string(KVTIER_SOURCE_DIR) +
                                 "/traces/mooncake_arxiv_trace_first1000.jsonl");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  trace->requests.resize(400);
  SweepEngine engine;
  engine.gpu_pool_blocks = 300;
  engine.gpu_flops_per_s = 8e14;
  auto policy = NamedSweepPolicy("kvtier");
  ASSERT_TRUE(policy.ok());
  const SweepCapacity cap{1000, 5000};
  auto off = RunSweepOne(*trace, engine, *policy, cap, {});
  engine.gpu_watermark = 0.1;
  auto on = RunSweepOne(*trace, engine, *policy, cap, {});
  ASSERT_TRUE(off.ok() && on.ok());
  EXPECT_GT(off->preemptions, 0u);
  EXPECT_LT(on->preemptions, off->preemptions);
  EXPECT_LT(on->recomputed_tokens, off->recomputed_tokens);
  EXPECT_EQ(on->requests, 400u);
  EXPECT_EQ(off->requests, 400u);
}

// A request that does not fit the GPU pool at its longest preempted itself
// at every decode step: one prompt of 374 blocks with 7 output tokens in a
// pool of 300 reported 6 preemptions and 21 recomputed tokens. It is left
// out, and a run given one is refused.
TEST(SweepEngineTest, RequestsLargerThanThePoolAreLeftOut) {
  Trace trace;
  const uint32_t bt = trace.block_tokens;
  std::vector<uint64_t> big(374);
  for (uint64_t i = 0; i < big.size(); ++i) big[i] = 1000 + i;
  trace.requests.push_back({0, 374 * bt, 7, big});
  trace.requests.push_back(
      {10, 299 * bt - 1, 1, std::vector<uint64_t>(big.begin(), big.begin() + 299)});
  trace.requests.push_back({20, 299 * bt - 1, 2, {1}});  // its second token starts block 300
  trace.requests.push_back({30, 299 * bt, 1, {2}});      // its first token starts block 300
  SweepEngine engine;
  engine.gpu_pool_blocks = 300;
  EXPECT_EQ(PeakPoolBlocks(trace.requests[0], bt), 375u);
  EXPECT_EQ(PeakPoolBlocks(trace.requests[1], bt), 299u);
  EXPECT_EQ(PeakPoolBlocks(trace.requests[2], bt), 300u);
  EXPECT_EQ(PeakPoolBlocks(trace.requests[3], bt), 300u);
  const auto refused = RunSweepOne(trace, engine, *NamedSweepPolicy("lru"), {10, 0}, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString(),
            "invalid_argument: sweep: request 0 needs 375 GPU blocks at its longest, more than "
            "the pool's 300; leave it out (DropRequestsLargerThanPool)");
  trace.requests.push_back({40, 300 * bt, 1, {3}});
  const LeftOut left = DropRequestsLargerThanPool(trace, engine);
  EXPECT_EQ(left.requests, 2u);
  EXPECT_EQ(left.blocks, 375u);
  ASSERT_EQ(trace.requests.size(), 3u);
  EXPECT_EQ(trace.requests[0].timestamp_ms, 10u);
  const auto run = RunSweepOne(trace, engine, *NamedSweepPolicy("lru"), {10, 0}, {});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->requests, 3u);
  EXPECT_EQ(run->preemptions, 0u);
  EXPECT_EQ(run->recomputed_tokens, 0u);
}

TEST(SweepEngineTest, OracleIsTheCeilingOfAdmitAllLru) {
  auto trace = ReadMooncakeTrace(std::string(KVTIER_SOURCE_DIR) +
                                 "/traces/mooncake_arxiv_trace_first1000.jsonl");
  ASSERT_TRUE(trace.ok());
  const SweepCapacity cap{610, 3662};
  auto lru = RunSweepOne(*trace, {}, *NamedSweepPolicy("lru"), cap, {});
  auto oracle = RunSweepOne(*trace, {}, *NamedSweepPolicy("oracle"), cap, {});
  ASSERT_TRUE(lru.ok() && oracle.ok());
  EXPECT_GT(oracle->HitRate(), lru->HitRate());
  EXPECT_LT(oracle->bytes_written_nvme, lru->bytes_written_nvme);
}

// Two long requests of `prompt` tokens (2 blocks) preempt each other in a
// GPU pool of 8 blocks; then 200 one-block requests cycle over 20 ids. The
// run under `policy` with a hub of `hub_blocks`.
// With `shared`, both long requests have the same prompt.
Result<SweepResult> RunPreempting(uint32_t prompt, const char* policy, uint64_t hub_blocks,
                                  bool save_on_preempt = true, bool shared = false) {
  Trace trace;
  trace.requests.push_back({0, prompt, 1100, {1, 2}});
  trace.requests.push_back(
      {0, prompt, 1100, shared ? std::vector<uint64_t>{1, 2} : std::vector<uint64_t>{3, 4}});
  for (uint64_t i = 0; i < 200; ++i)
    trace.requests.push_back({1000000 + i * 1000, 512, 1, {100 + i % 20}});
  SweepEngine engine;
  engine.gpu_pool_blocks = 8;
  engine.save_on_preempt = save_on_preempt;
  return RunSweepOne(trace, engine, *NamedSweepPolicy(policy), {hub_blocks, 0}, {});
}

// Blocks a preempted request saved are used once more, at its resume: the
// oracle kept them as if needed soon for good (their next use stayed in the
// past), crowding live blocks out of the hub: 4.9 % of tokens against LRU's
// 59.8 %.
TEST(SweepEngineTest, OracleStaysTheCeilingWhenPreemptedRequestsSave) {
  auto lru = RunPreempting(1024, "lru", 20);
  auto oracle = RunPreempting(1024, "oracle", 20);
  ASSERT_TRUE(lru.ok() && oracle.ok());
  ASSERT_GT(lru->preemptions, 0u);
  EXPECT_GE(oracle->HitRate(), lru->HitRate());
  EXPECT_GT(lru->HitRate(), 0.5);
}

// The two long requests share their prompt, and the first resumes after
// the second began: its prompt's next use, as built (the second request),
// had passed, and the oracle kept those blocks as if needed next for the
// rest of the run, in 2 of the hub's 20 slots that the cycle of 20 ids
// after them needs.
TEST(SweepEngineTest, OracleStaysTheCeilingWhenAResumedRequestsNextUsesHavePassed) {
  auto lru = RunPreempting(1024, "lru", 20, true, /*shared=*/true);
  auto oracle = RunPreempting(1024, "oracle", 20, true, /*shared=*/true);
  ASSERT_TRUE(lru.ok() && oracle.ok());
  ASSERT_GT(lru->preemptions, 0u);
  EXPECT_GE(oracle->HitRate(), lru->HitRate());
}

// A prompt that does not end on a block boundary: its KV, and what was
// generated, is saved before a preempted request's blocks are freed, so its
// resume loads it. Before, only block-aligned prompts saved anything, and
// the run recomputed as much with saving on as with it off.
TEST(SweepEngineTest, PreemptedRequestsWithUnalignedPromptsResumeByLoading) {
  auto saved = RunPreempting(1000, "lru", 40);
  auto recomputed = RunPreempting(1000, "lru", 40, /*save_on_preempt=*/false);
  ASSERT_TRUE(saved.ok() && recomputed.ok());
  ASSERT_GT(saved->preemptions, 0u);
  EXPECT_EQ(saved->preemptions, recomputed->preemptions);
  EXPECT_LT(saved->recomputed_tokens * 2, recomputed->recomputed_tokens)
      << saved->recomputed_tokens << " vs " << recomputed->recomputed_tokens;
}

// α tuning in the sweep is the runtime's: over AlphaGridFrom(current), so
// a replay where every α saves the same (no block is ever named twice)
// keeps the α in use rather than moving to the grid's first.
TEST(SweepEngineTest, AlphaTuningKeepsTheCurrentAlphaOnTies) {
  Trace trace;
  for (uint64_t r = 0; r < 40; ++r) {
    TraceRequest q;
    q.timestamp_ms = r * 10;
    q.input_length = 3 * trace.block_tokens;
    q.output_length = 1;
    q.hash_ids = {3 * r + 1, 3 * r + 2, 3 * r + 3};
    trace.requests.push_back(q);
  }
  PolicyKnobs knobs;
  knobs.flop_alpha = 2;
  knobs.alpha_tune_every = 4;
  knobs.alpha_tune_window = 8;
  auto r = RunSweepOne(trace, {}, *NamedSweepPolicy("flop_aware"), {10, 20}, knobs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->final_alpha, 2.0);
}

// Each tier is tuned against its own capacity: with nothing admitted into
// NVMe, its size cannot change what the hub keeps.
TEST(SweepEngineTest, AlphaTuningOfTheHubIgnoresTheNvmeCapacity) {
  auto trace = ReadMooncakeTrace(std::string(KVTIER_SOURCE_DIR) +
                                 "/traces/mooncake_arxiv_trace_first1000.jsonl");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  trace->requests.resize(400);
  SweepPolicy policy = *NamedSweepPolicy("flop_aware");
  policy.nvme_admission = {"frequency"};
  PolicyKnobs knobs;
  knobs.frequency_threshold = 0xFFFFFFFF;  // NVMe admits nothing
  knobs.alpha_tune_every = 16;
  knobs.alpha_tune_window = 64;
  auto small = RunSweepOne(*trace, {}, policy, {300, 30}, knobs);
  auto large = RunSweepOne(*trace, {}, policy, {300, 30000}, knobs);
  ASSERT_TRUE(small.ok() && large.ok());
  EXPECT_EQ(small->bytes_written_nvme, 0u);
  EXPECT_EQ(large->bytes_written_nvme, 0u);
  EXPECT_EQ(small->hit_tokens_host, large->hit_tokens_host);
  EXPECT_EQ(small->bytes_written_host, large->bytes_written_host);
}

}  // namespace
}  // namespace kvtier::bench
