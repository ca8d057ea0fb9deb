// The NVMe tier's reclaim drops blocks on its own: with nvme.reinsert_hits
// the cold ones (read fewer times) are evicted, not rewritten. The runtime
// must stop finding them: a lookup or IsSaved that reports a block no load
// can serve makes an engine free a preempted request as saved, which then
// resumes by recompute.
#include <gtest/gtest.h>

#include <vector>

#include "tests/core/runtime_test_util.h"
#include "tests/support/scratch_dir.h"

namespace kvtier::testing {
namespace {

TEST(RuntimeNvmeReclaimTest, BlocksTheReclaimEvictsAreNoLongerFound) {
  ScratchDir dir{"kvtier-nvme-reclaim-"};
  EngineSetup setup = MakeEngine(64);
  const uint64_t bb = setup.layout.BlockBytes();
  // A hub of 4 blocks that demotes down to 1 above 2, over a 12-block store
  // of 2-block regions, whose reclaim evicts every block never read.
  RuntimeOptions o = MakeOptions(bb, 4);
  o.tiers[0].watermarks = {.high = 0.5, .low = 0.25};
  TierOptions nvme;
  nvme.name = "ssd";
  nvme.type = "nvme";
  nvme.capacity_bytes = 12 * bb;
  nvme.path = dir.path() + "/data";
  nvme.region_bytes = 2 * (bb + 4096);  // two blocks, each behind its header page
  nvme.nvme.reinsert_hits = 1;
  o.tiers.push_back(nvme);
  auto opened = Runtime::Open(o, setup.engine);
  if (opened.status().code() == StatusCode::kNotSupported) GTEST_SKIP() << "no nvme tier here";
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Runtime> rt = std::move(opened).value();
  SimEngine sim(rt.get(), setup.engine.get());

  // Single-block roots go down one by one, none ever read back.
  std::vector<std::vector<BlockKey>> roots;
  auto put = [&](uint64_t id) {
    roots.push_back(ChainKeys({id}));
    sim.Prefill(roots.back(), 0);
    ASSERT_TRUE(sim.SaveFrom(roots.back(), 0, 0).status().ok());
    ASSERT_TRUE(rt->TEST_RunMoverOnce().ok());
  };
  for (uint64_t i = 0; i < 14; ++i) ASSERT_NO_FATAL_FAILURE(put(100 + i));
  // Every other one removed: each region keeps one live block, so the next
  // writes need reclaims, which evict those blocks instead of moving them.
  std::vector<std::vector<BlockKey>> kept;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (i % 2 == 0) {
      ASSERT_TRUE(rt->Remove(kTestNs, roots[i]).ok());
    } else {
      kept.push_back(roots[i]);
    }
  }
  for (uint64_t i = 14; i < 20; ++i) ASSERT_NO_FATAL_FAILURE(put(100 + i));

  // Every root still reported stored loads; and the reclaims did evict.
  size_t reported = 0;
  for (const std::vector<BlockKey>& root : kept) {
    const bool saved = rt->IsSaved(kTestNs, root);
    Result<LookupResult> found = rt->Lookup(kTestNs, root);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(saved, found->hit_blocks == 1) << ToHex(root[0]);
    if (found->hit_blocks == 0) continue;
    ++reported;
    sim.Scrub(32, 1);
    Completion c = sim.Load(root, 32);
    EXPECT_TRUE(c.status().ok()) << ToHex(root[0])
                                 << " is reported stored: " << c.status().ToString();
    EXPECT_TRUE(sim.Holds(32, root[0])) << ToHex(root[0]);
  }
  EXPECT_LT(reported, kept.size()) << "no reclaim evicted a block";
}

}  // namespace
}  // namespace kvtier::testing
