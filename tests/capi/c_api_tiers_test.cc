// The C API over a host hub and an NVMe tier: blocks the mover demotes are
// reported in tier 1 by lookups and load back byte for byte through the hub.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/capi/c_api_test_util.h"
#include "tests/support/scratch_dir.h"

namespace kvtier::testing {
namespace {

TEST(CApiTiersTest, DemotedBlocksAreFoundInTheNvmeTierAndLoadBack) {
  ScratchDir dir("kvtier-capi-");  // throws if it cannot be made
  // A hub of eight blocks whose mover keeps it at most half full, over an
  // NVMe file of 64 blocks.
  const std::string tiers =
      "tiers:\n"
      "  - {name: host, type: host, capacity: 64KiB, hugepages: false, mlock: false,\n"
      "     watermarks: {high: 0.5, low: 0.25}}\n"
      "  - {name: ssd, type: nvme, capacity: 512KiB, region_size: 256KiB,\n"
      "     path: \"" +
      dir.path() + "/data\"}\n";
  const std::string yaml =
      "model:\n  preset: tiny\n  block_tokens: 16\n"
      "engine:\n  pool_blocks: 16\n"
      "mover:\n  interval_ms: 5\n" +
      tiers;
  RuntimePtr rt = OpenText(yaml);
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 6, 3);
  ASSERT_EQ(SaveBlocks(rt.get(), keys, {0, 1, 2, 3, 4, 5}), KVTIER_OK) << kvtier_last_error();

  // Six blocks in a hub of eight over its high mark of four: the mover
  // demotes down to the low mark of two, the chain's tail leaf first, and
  // drops the hub copies.
  const std::vector<uint8_t> settled = {0, 0, 1, 1, 1, 1};
  std::vector<uint8_t> tiers_of(6, 9);
  size_t hits = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    ASSERT_EQ(kvtier_lookup(rt.get(), keys.data(), 6, nullptr, &hits, tiers_of.data()), KVTIER_OK);
    ASSERT_EQ(hits, 6u);
    // A leaf leaves before its parent: the blocks in the hub are a prefix.
    ASSERT_TRUE(std::is_sorted(tiers_of.begin(), tiers_of.end()));
    if (tiers_of == settled) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "the hub was not brought to its low mark; tier of block 5: " << int{tiers_of[5]};
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  const uint32_t dst[] = {8, 9, 10, 11, 12, 13};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_load(rt.get(), keys.data(), dst, 6, 10'000'000'000, nullptr, nullptr, &c),
            KVTIER_OK);
  CompletionPtr load(c);
  ASSERT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK) << kvtier_last_error();
  std::vector<unsigned char> back(8192);
  for (uint32_t i = 0; i < 6; ++i) {
    ASSERT_EQ(kvtier_host_block_read(rt.get(), dst[i], back.data(), back.size()), KVTIER_OK);
    EXPECT_EQ(back, Pattern(8192, i + 1)) << "block " << i;
  }
}

}  // namespace
}  // namespace kvtier::testing
