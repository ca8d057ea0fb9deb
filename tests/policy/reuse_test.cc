// Learned reuse admission, segmented LRU, the hybrid checkpoint model and the
// sweep's default set, on hand-built sequences with exact decisions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvtier/policy.h"
#include "tools/bench/sweep.h"
#include "tools/bench/sweep_hybrid.h"

namespace kvtier {
namespace {

BlockMeta Block(uint64_t id, uint32_t sightings = 0, uint64_t last_use = 0) {
  BlockMeta b;
  b.id = id;
  b.bytes = 100;
  b.sightings = sightings;
  b.last_use_ns = last_use;
  return b;
}

void Observe(AdmissionPolicy& p, const std::vector<uint64_t>& chain, size_t full) {
  p.ObserveRequest(chain, static_cast<uint32_t>(full), {}, 0);
}

TEST(ReuseAdmissionTest, RefusesPartialTailsAndAdmitsUnlearnedClasses) {
  auto p = CreateAdmissionPolicy("reuse", {});  // 64 samples before a class is judged
  ASSERT_TRUE(p.ok());
  Observe(**p, {1, 2, 3}, 2);  // block 3 is a partial last block
  EXPECT_TRUE((*p)->Admit(Block(1), {}));
  EXPECT_TRUE((*p)->Admit(Block(2), {}));
  EXPECT_FALSE((*p)->Admit(Block(3), {}));
  PolicyKnobs bad;
  bad.reuse_ratio = -1;
  EXPECT_TRUE(CreateAdmissionPolicy("reuse", bad).ok());  // Validate() is the caller's check
  EXPECT_EQ(bad.Validate().message(), "reuse_ratio and reuse_spread must be >= 0");
}

TEST(SlruEvictionTest, OnceSeenLeavesGoFirstUntilProtectedIsOverItsShare) {
  PolicyKnobs k;
  k.slru_protected_fraction = 0.5;
  auto made = CreateEvictionPolicy("slru", k);
  ASSERT_TRUE(made.ok());
  EvictionPolicy& p = **made;
  for (uint64_t id = 1; id <= 4; ++id) p.OnInsert(Block(id, 1));
  p.OnAccess(Block(2));  // 2 is seen twice: protected (1 of 4)
  auto order = [&](std::vector<BlockMeta> c) {
    p.Order(c, 0);
    std::vector<uint64_t> ids;
    for (const BlockMeta& b : c) ids.push_back(b.id);
    return ids;
  };
  const std::vector<BlockMeta> c = {Block(1, 1, 10), Block(2, 2, 5), Block(3, 1, 20),
                                    Block(4, 1, 30)};
  EXPECT_EQ(order(c), (std::vector<uint64_t>{1, 3, 4, 2}));
  p.OnRemove(3);            // remembered as a ghost seen once
  p.OnInsert(Block(3, 1));  // back: seen twice in all, protected (2 of 4)
  EXPECT_EQ(order(c), (std::vector<uint64_t>{1, 4, 2, 3}));
  p.OnAccess(Block(1));  // 3 of 4 protected > half: protected leaves go first
  EXPECT_EQ(order(c), (std::vector<uint64_t>{2, 1, 3, 4}));
}

}  // namespace

namespace bench {
namespace {

TEST(HybridSweepTest, MarconiCheckpointsBeatEveryBlockAtTheSameCapacity) {
  Trace trace;
  for (int i = 0; i < 2; ++i) trace.requests.push_back({0, 2048, 1, {1, 2, 3, 4}});
  HybridModel m;
  m.kv_bytes_per_block = 1;
  m.state_bytes = 4;
  // 14 bytes: every-block fits the KV and checkpoints 1 and 2 only; marconi
  // stores the tail's checkpoint alone, so the repeat resumes at block 4.
  auto every = RunHybridSweep(trace, m, CheckpointPlacement::kEveryBlock, 14, {});
  auto marconi = RunHybridSweep(trace, m, CheckpointPlacement::kMarconi, 14, {});
  ASSERT_TRUE(every.ok() && marconi.ok());
  EXPECT_EQ(every->tokens, 4096u);
  EXPECT_EQ(every->hit_tokens, 1024u);
  EXPECT_EQ(every->checkpoints_written, 2u);
  EXPECT_EQ(every->state_bytes_written, 8u);
  EXPECT_EQ(marconi->hit_tokens, 2048u);
  EXPECT_EQ(marconi->checkpoints_written, 1u);
  EXPECT_EQ(marconi->kv_bytes_written, 4u);
  // With room for everything, every-block also resumes at the tail.
  auto roomy = RunHybridSweep(trace, m, CheckpointPlacement::kEveryBlock, 100, {});
  ASSERT_TRUE(roomy.ok());
  EXPECT_EQ(roomy->hit_tokens, 2048u);
  EXPECT_EQ(roomy->checkpoints_written, 4u);
}

// A chain naming an id twice stops at the repeat, as the runtime's index
// would: the block got a second parent (itself, for [1, 1]), its bytes were
// counted twice, and the next eviction walked to an erased parent and threw.
TEST(HybridSweepTest, AChainNamingAnIdTwiceStopsThere) {
  Trace trace;
  trace.requests.push_back({0, 1536, 1, {1, 2, 1}});
  for (uint64_t id = 10; id < 20; ++id) trace.requests.push_back({id, 512, 1, {id}});
  HybridModel m;
  m.kv_bytes_per_block = 1;
  m.state_bytes = 1;
  auto r = RunHybridSweep(trace, m, CheckpointPlacement::kEveryBlock, 4, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kv_bytes_written, 12u);  // 1 and 2, then 10..19: the repeat is not stored
  EXPECT_EQ(r->hit_tokens, 0u);
}

TEST(SweepPolicyTest, CustomSetsParse) {
  auto p = CustomSweepPolicy("slru:reuse+cost:lru");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->host_eviction, "slru");
  EXPECT_EQ(p->nvme_admission, (std::vector<std::string>{"reuse", "cost"}));
  EXPECT_EQ(p->nvme_eviction, "lru");
  EXPECT_EQ(CustomSweepPolicy("lru:always").status().message(),
            "custom policy set 'lru:always': expected "
            "HOST_EVICTION:ADMISSION[+ADMISSION...]:NVME_EVICTION");
  EXPECT_EQ(NamedSweepPolicy("kvtier")->nvme_admission, (std::vector<std::string>{"reuse"}));
}

// Runs the named sets at one capacity point of a trace in traces/, as
// `kvtier-bench sweep --gpu-tflops 800` does.
std::vector<SweepResult> SweepPoint(const std::string& file, SweepCapacity cap,
                                    const std::vector<std::string>& sets) {
  auto trace = ReadMooncakeTrace(std::string(KVTIER_SOURCE_DIR) + "/traces/" + file);
  EXPECT_TRUE(trace.ok()) << file;
  std::vector<SweepResult> out;
  if (!trace.ok()) return out;
  SweepEngine engine;
  engine.gpu_flops_per_s = 8e14;
  for (const std::string& name : sets) {
    auto r = RunSweepOne(*trace, engine, *NamedSweepPolicy(name), cap, {});
    EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

// The default set against admit-all + LRU at the arXiv trace's smallest point
// (host 5 %, NVMe 30 % of 12,207 unique blocks): at least LRU's token hit rate
// with at most half its NVMe bytes (docs/BENCHMARKS.md).
TEST(SweepPolicyTest, DefaultSetMatchesLruWithHalfTheWritesOnArxiv) {
  const auto r = SweepPoint("mooncake_arxiv_trace_first1000.jsonl", {610, 3662}, {"lru", "kvtier"});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_GE(r[1].HitRate(), r[0].HitRate());
  EXPECT_LE(2 * r[1].bytes_written_nvme, r[0].bytes_written_nvme);
}

// The whole target at the synthetic trace's smallest point (host 5 %, NVMe
// 30 % of 43,924 unique blocks), where NVMe fills and its eviction matters:
// at most half of admit-all + LRU's NVMe bytes, and at least half of the
// hit-rate gap between it and the oracle closed (docs/BENCHMARKS.md).
TEST(SweepPolicyTest, DefaultSetClosesHalfTheGapOnSyntheticWithHalfTheWrites) {
  const auto r =
      SweepPoint("mooncake_synthetic_trace.jsonl", {2196, 13177}, {"lru", "oracle", "kvtier"});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_GE(r[2].HitRate(), (r[0].HitRate() + r[1].HitRate()) / 2);
  EXPECT_LE(2 * r[2].bytes_written_nvme, r[0].bytes_written_nvme);
}

}  // namespace
}  // namespace bench
}  // namespace kvtier
