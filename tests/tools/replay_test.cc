#include "tools/bench/replay.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "tests/support/fault_tier.h"
#include "tests/support/tier_view.h"
#include "tests/tools/trace_line.h"
#include "tools/bench/block_content.h"
#include "tools/bench/report.h"

namespace kvtier::bench {
namespace {

const std::string kSourceDir = KVTIER_SOURCE_DIR;

// The "tiny" model (128 KiB blocks) with one host tier of `host_blocks`.
KvtierConfig TinyConfig(uint64_t host_blocks) {
  KvtierConfig c;
  c.source = "test";
  c.gpu_pool_blocks = 8;
  c.runtime.block_bytes = c.model.BlockBytes();
  TierOptions host;
  host.name = "host";
  host.type = "host";
  host.capacity_bytes = host_blocks * c.runtime.block_bytes;
  host.hugepages = false;
  host.mlock = false;
  c.runtime.tiers = {host};
  c.runtime.log = StderrLogSink(LogLevel::kWarning);
  return c;
}

// TinyConfig(64) for a hybrid model with a 2-block state; the pool fits the
// 4-block requests beside it.
KvtierConfig HybridConfig() {
  KvtierConfig c = TinyConfig(64);
  c.runtime.state_blocks = 2;
  c.gpu_pool_blocks = 6;
  return c;
}

Trace TinyTrace() {
  Result<Trace> t = ReadMooncakeTrace(kSourceDir + "/traces/tiny.jsonl");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Trace();
}

TEST(BlockContentTest, DeterministicAndKeyDependent) {
  std::vector<std::byte> a(100), b(100), c(100);
  FillBlockContent(BlockKey{1, 2}, a);
  FillBlockContent(BlockKey{1, 2}, b);
  FillBlockContent(BlockKey{2, 1}, c);  // same hi ^ lo, so same stream
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  FillBlockContent(BlockKey{1, 3}, c);
  EXPECT_NE(a, c);
  // First word: splitmix64 of seed 3, little-endian.
  EXPECT_EQ(a[0], std::byte{0xed});
  std::vector<std::byte> prefix(13);
  FillBlockContent(BlockKey{1, 2}, prefix);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));
}

TEST(ReplayTest, LargeHostTierHitsEveryCachedPrefix) {
  const Trace trace = TinyTrace();
  Result<ReplayReport> r = ReplayTrace(TinyConfig(64), trace, ReplayOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 7u);
  EXPECT_EQ(r->skipped_requests, 0u);
  EXPECT_EQ(r->blocks, 20u);
  // Full blocks only, as an engine: [1 2] [1 2] [1 2 4] [6] [1 2 4] [1 9 10]
  // [11 2]; the partial 5 of lines 3 and 5 is computed both times.
  EXPECT_EQ(r->lookup_hits, 8u);
  EXPECT_EQ(r->block_hits, 8u);
  EXPECT_EQ(r->hit_requests, 4u);
  EXPECT_EQ(r->tokens, 8584u);
  EXPECT_EQ(r->token_hits, 4096u);
  EXPECT_EQ(r->infinite.hit_blocks, 8u);
  EXPECT_EQ(r->infinite.unique_blocks, 11u);  // blocks of the trace, partial ones too
  EXPECT_EQ(r->verify_failures, 0u);
  EXPECT_EQ(r->load_failures, 0u);
  EXPECT_EQ(r->save_failures, 0u);
  EXPECT_EQ(r->lookup_failures, 0u);
  EXPECT_EQ(r->bytes_loaded, 8 * r->block_bytes);
  // 8 full blocks were new: every one was saved.
  EXPECT_EQ(r->bytes_saved, 8 * r->block_bytes);
  // The rates' time: inside Load and Save only, a part of the whole loop.
  EXPECT_GT(r->load_s, 0);
  EXPECT_GT(r->save_s, 0);
  EXPECT_LE(r->load_s + r->save_s, r->elapsed_s);
  ASSERT_EQ(r->runtime.tiers.size(), 1u);
  EXPECT_EQ(r->runtime.tiers[0].name, "host");
  EXPECT_EQ(r->runtime.tiers[0].blocks, 8u);
}

TEST(ReplayTest, AnIdUsedAgainUnderAnotherPrefixIsCountedAsTheReplayFindsIt) {
  // 2 alone, and 3 after 1, are other blocks than 2 after 1 and 3 after 2:
  // the replay and its reference agree on 3 hits (the reference said 5).
  Result<Trace> trace = ParseMooncakeTrace(IdsUsedUnderOtherPrefixes(), "mem");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  Result<ReplayReport> r = ReplayTrace(TinyConfig(64), *trace, ReplayOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->block_hits, 3u);
  EXPECT_EQ(r->infinite.hit_blocks, 3u);
  EXPECT_EQ(r->infinite.unique_blocks, 5u);
  EXPECT_EQ(r->verify_failures, 0u);
}

TEST(ReplayTest, TinyHostTierHitsLessButNeverReturnsWrongBytes) {
  const Trace trace = TinyTrace();
  Result<ReplayReport> r = ReplayTrace(TinyConfig(2), trace, ReplayOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 7u);
  EXPECT_EQ(r->blocks, 20u);
  // With two blocks of room no request can hit more than two blocks.
  EXPECT_LE(r->block_hits, 7u);
  EXPECT_EQ(r->verify_failures, 0u);
  EXPECT_EQ(r->load_failures, 0u);
  EXPECT_EQ(r->block_hits, r->lookup_hits);
}

TEST(ReplayTest, RequestsLargerThanThePoolAreSkipped) {
  const Trace trace = TinyTrace();
  KvtierConfig config = TinyConfig(64);
  config.gpu_pool_blocks = 3;  // lines 3 and 5 need 4 blocks
  Result<ReplayReport> r = ReplayTrace(config, trace, ReplayOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 5u);
  EXPECT_EQ(r->skipped_requests, 2u);
  EXPECT_EQ(r->skipped_blocks, 8u);
  EXPECT_EQ(r->blocks, 12u);
  // Lines 2 (2 hits) and 6 (1 hit) remain.
  EXPECT_EQ(r->block_hits, 3u);
  EXPECT_EQ(r->infinite.hit_blocks, 3u);
  EXPECT_EQ(r->verify_failures, 0u);
}

// A replay of nothing exited 0 with "requests: 0", as if it had passed.
TEST(ReplayTest, NothingToReplayIsAnError) {
  KvtierConfig config = TinyConfig(64);
  config.gpu_pool_blocks = 1;  // every request of tiny.jsonl needs 2 or more
  Result<ReplayReport> r = ReplayTrace(config, TinyTrace(), ReplayOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().ToString(),
            "invalid_argument: no request fits the engine pool: all 7 need more than "
            "engine.pool_blocks 1");
  Trace empty;
  empty.source = "empty.jsonl";
  r = ReplayTrace(TinyConfig(64), empty, ReplayOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().ToString(), "invalid_argument: the trace empty.jsonl has no requests");
  // Requests, but of no tokens: they name no block.
  Result<Trace> zero = ParseMooncakeTrace(
      "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}\n"
      "{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 9, \"hash_ids\": []}\n",
      "zero.jsonl");
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  r = ReplayTrace(TinyConfig(64), *zero, ReplayOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().ToString(),
            "invalid_argument: the trace zero.jsonl names no block: all 2 requests have "
            "input_length 0");
}

// A hybrid model with a 2-block state: the engine offers a checkpoint at
// every new block; with `always` the hub keeps all of them, so every KV hit
// resumes, as without state.
TEST(ReplayTest, HybridModelResumesFromEveryCheckpointTheHubKeeps) {
  const Trace trace = TinyTrace();
  KvtierConfig config = HybridConfig();
  Result<ReplayReport> r = ReplayTrace(config, trace, ReplayOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 7u);
  EXPECT_EQ(r->block_hits, 8u);  // 2 + 2 + 3 + 1, as in LargeHostTierHitsEveryCachedPrefix
  EXPECT_EQ(r->lookup_hits, 8u);
  EXPECT_EQ(r->state_resumes, 4u);
  EXPECT_EQ(r->checkpoints_offered, 8u);  // one per new full block
  EXPECT_EQ(r->checkpoints_saved, 8u);
  EXPECT_EQ(r->checkpoints_unstored, 0u);
  EXPECT_EQ(r->state_bytes_loaded, 4 * 2 * r->block_bytes);
  EXPECT_EQ(r->state_bytes_saved, 8 * 2 * r->block_bytes);
  EXPECT_EQ(r->bytes_saved, 8 * r->block_bytes + r->state_bytes_saved);
  EXPECT_EQ(r->verify_failures + r->load_failures + r->save_failures, 0u);
  EXPECT_EQ(r->runtime.tiers[0].blocks, 8u + 8 * 2);
  EXPECT_EQ(r->runtime.lookup_state_cut_blocks, 0u);
}

// Marconi keeps checkpoints at tails and branch points only: a request
// resumes where an earlier one ended or branched, and recomputes otherwise.
TEST(ReplayTest, HybridModelWithMarconiKeepsTailAndBranchCheckpoints) {
  const Trace trace = TinyTrace();
  KvtierConfig config = HybridConfig();
  config.runtime.tiers[0].admission = {"marconi"};
  config.runtime.tiers[0].policy.marconi_checkpoints_only = true;
  Result<ReplayReport> r = ReplayTrace(config, trace, ReplayOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Full blocks: [1 2]: keeps 2 (tail). [1 2]: resumes at 2 (2 hits).
  // [1 2 4]: resumes at 2 (2 hits), keeps 4. [6]: keeps 6. [1 2 4]: resumes
  // at 4 (3 hits). [1 9 10]: 1 is now a branch point with no state yet,
  // recomputes, keeps 1 and 10. [11 2]: keeps its 2.
  EXPECT_EQ(r->block_hits, 7u);
  EXPECT_EQ(r->state_resumes, 3u);
  EXPECT_EQ(r->checkpoints_offered, 9u);
  EXPECT_EQ(r->checkpoints_saved, 6u);
  EXPECT_EQ(r->lookup_hits, 7u);
  EXPECT_EQ(r->verify_failures + r->load_failures + r->save_failures, 0u);
  EXPECT_EQ(r->runtime.tiers[0].blocks, 8u + 6 * 2);
  // Cut at the lookup of [1 9 10]: block 1 had no state.
  EXPECT_EQ(r->runtime.lookup_state_cut_blocks, 1u);
}

// A checkpoint offered on a block the hub refused has nothing to sit on: it
// counts as unstored, not as a failed save.
TEST(ReplayTest, HybridCheckpointOfARefusedBlockIsUnstored) {
  KvtierConfig config = HybridConfig();
  config.runtime.tiers[0].admission = {"marconi"};  // judges KV blocks too
  config.runtime.tiers[0].policy.marconi_probation = 0;
  Result<ReplayReport> r = ReplayTrace(config, TinyTrace(), ReplayOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // A KV block is admitted once named twice, a checkpoint at a tail or a
  // branch point. [1 2]: both refused, 2 unstored. [1 2]: stored, keeps 2
  // (1 is refused: no tail). [1 2 4]: resumes at 2; 4 refused, unstored.
  // [6]: unstored. [1 2 4]: resumes at 2, stores 4, keeps it (tail).
  // [1 9 10]: 1 has no state, recomputes; keeps 1 (now a branch), 9 and
  // 10 refused, unstored. [11 2]: 2 unstored.
  EXPECT_EQ(r->checkpoints_offered, 12u);
  EXPECT_EQ(r->checkpoints_saved, 3u);
  EXPECT_EQ(r->checkpoints_unstored, 8u);
  EXPECT_EQ(r->block_hits, 4u);
  EXPECT_EQ(r->verify_failures + r->load_failures + r->save_failures, 0u);
}

// A prompt shorter than a block has no full block: nothing to look up or
// save, with or without state checkpoints.
TEST(ReplayTest, APromptWithoutAFullBlockIsComputedWhole) {
  Result<Trace> t = ParseMooncakeTrace(
      "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 1, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1]}\n",
      "mem");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (uint32_t state_blocks : {0u, 2u}) {
    KvtierConfig config = TinyConfig(64);
    config.runtime.state_blocks = state_blocks;
    Result<ReplayReport> r = ReplayTrace(config, *t, ReplayOptions());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->requests, 2u);
    EXPECT_EQ(r->blocks, 2u);
    EXPECT_EQ(r->block_hits, 0u);
    EXPECT_EQ(r->infinite.hit_blocks, 0u);
    EXPECT_EQ(r->bytes_saved, 0u);
    EXPECT_EQ(r->checkpoints_offered, 0u);
    EXPECT_EQ(r->verify_failures + r->load_failures + r->save_failures + r->lookup_failures, 0u);
  }
}

// HybridConfig with a 12-block hub that demotes down to 2 blocks once it
// holds 5, into a lower host tier wrapped in `faults`. Leaves go down first,
// so a checkpoint's parts (leaves below their block) leave the hub before
// the chain they sit on.
KvtierConfig HybridConfigOverFaultyTier(testing::FaultOptions faults) {
  KvtierConfig c = HybridConfig();
  c.runtime.tiers[0].capacity_bytes = 12 * c.runtime.block_bytes;
  c.runtime.tiers[0].watermarks = {.high = 0.4, .low = 0.2};
  c.runtime.mover.interval_ms = 1;
  TierOptions lower = c.runtime.tiers[0];
  lower.name = "faulty";
  lower.capacity_bytes = 64 * c.runtime.block_bytes;
  lower.watermarks = {.high = 0.95, .low = 0.85};  // never fills on the tiny trace
  c.runtime.tiers.push_back(lower);
  c.runtime.tier_factory = [faults](const TierOptions& t,
                                    const TierContext& ctx) -> Result<std::unique_ptr<Tier>> {
    Result<std::unique_ptr<Tier>> inner = CreateTier(t, ctx);
    if (!inner.ok()) return inner.status();
    return testing::NewFaultInjectingTier(std::move(inner).value(), faults);
  };
  return c;
}

// A checkpoint whose parts come back corrupted cannot be resumed from: the
// engine recomputes the whole prompt even though its KV blocks loaded, and
// never counts a hit on wrong bytes.
TEST(ReplayTest, HybridStateThatFailsToLoadMeansRecompute) {
  ReplayOptions options;
  // Saves make room in the hub as they go; the pause lets the 1 ms mover
  // finish any batch it started before the next lookup.
  options.progress = [](uint64_t, uint64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };
  Result<ReplayReport> clean = ReplayTrace(HybridConfigOverFaultyTier({}), TinyTrace(), options);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_EQ(clean->block_hits, 8u);  // as with everything in the hub
  EXPECT_EQ(clean->state_resumes, 4u);
  EXPECT_EQ(clean->state_load_failures, 0u);
  EXPECT_EQ(clean->hit_requests, 4u);
  EXPECT_EQ(clean->load_failures + clean->verify_failures, 0u);
  EXPECT_GT(clean->runtime.tiers[1].hit_blocks, 0u);  // the lower tier served loads

  testing::FaultOptions corrupt;
  corrupt.corrupt_on_read = true;
  Result<ReplayReport> r = ReplayTrace(HybridConfigOverFaultyTier(corrupt), TinyTrace(), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lookup_hits, 8u);  // the lookups find the same prefixes
  EXPECT_GT(r->load_failures, 0u);
  EXPECT_EQ(r->verify_failures, 0u);
  EXPECT_GT(r->runtime.tiers[1].corruptions, 0u);
  EXPECT_GT(r->state_load_failures, 0u);
  EXPECT_EQ(r->hit_requests, r->state_resumes);  // a hit needs its state
  EXPECT_LT(r->block_hits, 8u);
  // KV blocks loaded (and checked) beyond those counted as hits: a request
  // whose state failed recomputed although its KV prefix was good.
  EXPECT_GT(r->bytes_loaded - r->state_bytes_loaded, r->block_hits * r->block_bytes);
  EXPECT_EQ(r->state_bytes_loaded, r->state_resumes * 2 * r->block_bytes);
}

TEST(ReplayTest, HybridModelNeedsRoomBesideTheStateInThePool) {
  KvtierConfig config = TinyConfig(64);
  config.runtime.state_blocks = 8;  // the pool holds 8
  Result<ReplayReport> r = ReplayTrace(config, TinyTrace(), ReplayOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("engine.pool_blocks 8"), std::string::npos)
      << r.status().ToString();
  config.runtime.state_blocks = 5;  // 3 blocks beside it: 4-block requests are skipped
  r = ReplayTrace(config, TinyTrace(), ReplayOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->skipped_requests, 2u);
}

TEST(ReplayTest, LimitStopsEarlyAndProgressIsReported) {
  const Trace trace = TinyTrace();
  ReplayOptions options;
  options.limit = 3;
  std::vector<uint64_t> done;
  options.progress = [&](uint64_t d, uint64_t total) {
    EXPECT_EQ(total, 3u);
    done.push_back(d);
  };
  Result<ReplayReport> r = ReplayTrace(TinyConfig(64), trace, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 3u);
  EXPECT_EQ(r->blocks, 9u);
  EXPECT_EQ(r->block_hits, 4u);  // 0 + 2 + 2
  EXPECT_EQ(done, (std::vector<uint64_t>{1, 2, 3}));
}

// A signal during a replay (SIGINT from the terminal, SIGTERM from a
// supervisor) stops it after the request in progress: the runtime shuts down
// as at the end, and the report, its infinite-cache reference included,
// covers the requests that ran; the exit status says which signal.
TEST(ReplayTest, AnInterruptStopsAfterTheRequestInProgress) {
  const Trace trace = TinyTrace();
  ReplayOptions options;
  std::atomic<int> interrupt{0};
  options.interrupt = &interrupt;
  options.progress = [&](uint64_t done, uint64_t) {
    if (done == 2) interrupt = SIGTERM;
  };
  Result<ReplayReport> r = ReplayTrace(TinyConfig(64), trace, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 2u);
  EXPECT_EQ(r->interrupted_by, SIGTERM);
  EXPECT_EQ(r->planned_requests, trace.requests.size());
  EXPECT_EQ(r->infinite.requests, 2u);
  EXPECT_EQ(r->verify_failures, 0u);
  EXPECT_EQ(ReplayExitCode(*r), 143);
  EXPECT_NE(FormatReplayReport(*r).find("interrupted:    by signal 15 after 2 of " +
                                        std::to_string(trace.requests.size()) + " requests"),
            std::string::npos)
      << FormatReplayReport(*r);
}

// Interrupted before its restart, a replay reports no restart (it used to
// count every request as after one).
TEST(ReplayTest, AnInterruptBeforeTheRestartReportsNoRestart) {
  ReplayOptions options;
  options.restart_at = 3;
  std::atomic<int> interrupt{0};
  options.interrupt = &interrupt;
  options.progress = [&](uint64_t done, uint64_t) {
    if (done == 2) interrupt = SIGINT;
  };
  Result<ReplayReport> r = ReplayTrace(TinyConfig(64), TinyTrace(), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 2u);
  EXPECT_EQ(r->restart_at, 0u);
  EXPECT_EQ(r->requests_after_restart, 0u);
  EXPECT_EQ(r->block_hits_after_restart, 0u);
  EXPECT_EQ(FormatReplayReport(*r).find("after restart:"), std::string::npos)
      << FormatReplayReport(*r);
}

TEST(ReplayTest, RunReplayWithExampleConfigAndGenerator) {
  ReplayOptions options;
  options.config_path = kSourceDir + "/config/examples/default.yaml";
  options.overrides = {"tiers.host.capacity=64MiB", "tiers.host.mlock=false"};
  SyntheticOptions gen;
  gen.sessions = 2;
  gen.steps = 2;
  gen.system_prompts = 1;
  gen.system_prompt_blocks = 2;
  gen.initial_blocks = 1;
  gen.growth_blocks = 1;
  gen.growth_jitter = 0;
  gen.interval_jitter = 0;
  options.synthetic = gen;
  Result<ReplayReport> r = RunReplay(options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 4u);
  EXPECT_EQ(r->blocks, 14u);
  EXPECT_EQ(r->block_hits, 8u);
  EXPECT_EQ(r->verify_failures, 0u);
  ASSERT_EQ(r->runtime.tiers.size(), 1u);
  EXPECT_EQ(r->runtime.tiers[0].capacity_bytes, 64 * kMiB);

  const std::string json = ReplayReportJson(*r);
  EXPECT_NE(json.find("\"block_hits\":8,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"infinite_cache_block_hits\":8,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"tiers\":[{\"name\":\"host\",\"type\":\"host\","), std::string::npos)
      << json;
}

// config/examples/hybrid.yaml drives the hybrid path end to end: marconi
// keeps a few of the checkpoints offered, requests resume from them, and
// every loaded block and state part has the right bytes.
TEST(ReplayTest, RunReplayWithHybridExampleConfig) {
  ReplayOptions options;
  options.config_path = kSourceDir + "/config/examples/hybrid.yaml";
  options.trace_path = kSourceDir + "/traces/mooncake_arxiv_trace_first1000.jsonl";
  options.overrides = {"model.layers=1", "model.kv_heads=1", "model.head_size=4"};
  options.limit = 200;
  Result<ReplayReport> r = RunReplay(options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 200u);
  EXPECT_EQ(r->state_blocks, 4u);
  EXPECT_GT(r->state_resumes, 0u);
  EXPECT_GT(r->checkpoints_saved, 0u);
  EXPECT_LT(r->checkpoints_saved * 4, r->checkpoints_offered) << "marconi keeps a few";
  EXPECT_GT(r->block_hits, 0u);
  EXPECT_LE(r->block_hits, r->infinite.hit_blocks);
  EXPECT_EQ(r->verify_failures + r->load_failures + r->save_failures + r->lookup_failures, 0u);
}

TEST(ReplayTest, RunReplayReportsConfigAndTraceErrors) {
  ReplayOptions options;
  options.config_path = kSourceDir + "/config/examples/no_such.yaml";
  options.trace_path = kSourceDir + "/traces/tiny.jsonl";
  EXPECT_FALSE(RunReplay(options).ok());
  options.config_path = kSourceDir + "/config/examples/default.yaml";
  options.trace_path = kSourceDir + "/traces/no_such.jsonl";
  Result<ReplayReport> r = RunReplay(options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

// TinyConfig(64) over a persistent lower tier that outlives each runtime
// (`disk`, never above its watermark on the tiny trace), with
// mover.shutdown_writeback_ms `writeback_ms`.
KvtierConfig ConfigOverDisk(std::shared_ptr<Tier> disk, uint64_t writeback_ms) {
  KvtierConfig c = TinyConfig(64);
  c.runtime.mover.shutdown_writeback_ms = writeback_ms;
  TierOptions lower = c.runtime.tiers[0];
  lower.name = "disk";
  c.runtime.tiers.push_back(lower);
  c.runtime.tier_factory = [disk](const TierOptions&,
                                  const TierContext&) -> Result<std::unique_ptr<Tier>> {
    return testing::NewTierView(disk, TierCapabilities{.persistent = true, .local_index = true});
  };
  return c;
}

// A restart after request 3 of the tiny trace ([1 2] [1 2] [1 2 4] | [6]
// [1 2 4] [1 9 10] [11 2]). Host tier only: the hub starts empty, so [1 2 4]
// is saved again and only [1 9 10] finds its 1. With a persistent tier and
// the shutdown writeback, [1 2 4] is found there (adopted) and every hit of a
// replay without the restart comes back; without the writeback it is not.
TEST(ReplayTest, RestartCountsTheHitsAfterIt) {
  ReplayOptions options;
  options.restart_at = 3;
  Result<ReplayReport> r = ReplayTrace(TinyConfig(64), TinyTrace(), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->restart_at, 3u);
  EXPECT_EQ(r->requests_after_restart, 4u);
  EXPECT_EQ(r->blocks_after_restart, 11u);  // partial last blocks too, as `blocks`
  EXPECT_EQ(r->block_hits_after_restart, 1u);
  EXPECT_EQ(r->token_hits_after_restart, 512u);
  EXPECT_EQ(r->block_hits, 5u);
  EXPECT_EQ(r->verify_failures + r->load_failures + r->save_failures + r->lookup_failures, 0u);
  EXPECT_NE(FormatReplayReport(*r).find("after restart:  4 requests after the restart at request "
                                        "3: block hits 1 of 11 (9.09%)"),
            std::string::npos)
      << FormatReplayReport(*r);

  for (uint64_t writeback_ms : {uint64_t{0}, uint64_t{10000}}) {
    SCOPED_TRACE(writeback_ms);
    KvtierConfig base = TinyConfig(64);
    Result<std::unique_ptr<Tier>> disk =
        CreateTier(base.runtime.tiers[0], TierContext{base.runtime.block_bytes});
    ASSERT_TRUE(disk.ok());
    std::shared_ptr<Tier> shared = std::move(disk).value();
    r = ReplayTrace(ConfigOverDisk(shared, writeback_ms), TinyTrace(), options);
    shared->Shutdown();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->block_hits_after_restart, writeback_ms == 0 ? 1u : 4u);
    EXPECT_EQ(r->block_hits, writeback_ms == 0 ? 5u : 8u);
    EXPECT_EQ(r->runtime.adopted_blocks, writeback_ms == 0 ? 0u : 3u);
    EXPECT_EQ(r->verify_failures + r->load_failures + r->save_failures + r->lookup_failures, 0u);
  }

  options.restart_at = 7;
  r = ReplayTrace(TinyConfig(64), TinyTrace(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--restart-at 7 is not before the last of the 7 requests replayed");
}

}  // namespace
}  // namespace kvtier::bench
