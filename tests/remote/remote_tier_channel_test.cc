// The remote tier against an in-process kvtier-memd (memd_test_options.h)
// where part of the work cannot be done: a server that takes fewer
// connections than the tier opens, and a rewrite the server refuses. What
// fails must be only what could not be done.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/tier.h"
#include "tests/remote/memd_test_options.h"
#include "tests/support/block_data.h"
#include "tiers/remote/memd_server.h"

namespace kvtier::testing {
namespace {

namespace memd = internal::memd;

constexpr char kSecret[] = "channel-test-secret";
constexpr uint64_t kBlock = 32 << 10;  // fits the 64 KiB slots with its header
constexpr NamespaceId kNs{21};
constexpr auto kWait = std::chrono::seconds(5);

class RemoteTierChannelTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (tier_) tier_->Shutdown();
    if (server_) server_->Stop();
  }
  void StartServer(const std::function<void(memd::MemdServerOptions&)>& adjust) {
    memd::MemdServerOptions o = SmallMemdOptions(kSecret, "tcp");
    adjust(o);
    auto s = memd::MemdServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  void OpenTier(uint32_t connections) {
    TierOptions o;
    o.name = "channel-remote";
    o.type = "remote";
    o.capacity_bytes = 64 * kBlock;
    o.servers = {"127.0.0.1:" + std::to_string(server_->port())};
    o.remote.secret = kSecret;
    o.remote.connections = connections;
    o.remote.reconnect_backoff_ms = 1;
    o.remote.reconnect_backoff_max_ms = 1;
    auto t = CreateTier(o, TierContext{kBlock, SystemClock(), StderrLogSink(LogLevel::kError), {}});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
  }
  // Writes `blocks` in one batch; returns its completion, finished.
  Completion WriteBatch(const std::vector<std::pair<BlockKey, std::vector<std::byte>>>& blocks) {
    std::vector<WriteOp> ops;
    for (const auto& [key, data] : blocks) ops.push_back({key, data});
    Completion c = tier_->Write(kNs, ops);
    const Status waited = c.WaitFor(kWait);
    EXPECT_TRUE(c.Poll()) << "no result within 5 s: " << waited.ToString();
    return c;
  }

  std::unique_ptr<memd::MemdServer> server_;
  std::unique_ptr<Tier> tier_;
};

// The server takes one connection and closes any other at once; the tier
// opens two. Requests whose turn falls on the refused connection go over the
// working one instead of failing: the server is up, so no block fails.
// Before, half of every batch failed with Unavailable, round after round.
TEST_F(RemoteTierChannelTest, AServerTakingFewerConnectionsStillServesEveryBlock) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) {
    o.max_connections = 1;
    o.pool.pool_bytes = 64 * o.pool.slot_bytes;  // every block of the test stays
  }));
  ASSERT_NO_FATAL_FAILURE(OpenTier(2));
  constexpr uint64_t kBlocks = 8;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::pair<BlockKey, std::vector<std::byte>>> blocks;
    for (uint64_t i = 0; i < kBlocks; ++i) {
      const BlockKey key = TestKey(round * kBlocks + i);
      blocks.emplace_back(key, BlockBytes(key, kBlock));
    }
    Completion w = WriteBatch(blocks);
    ASSERT_TRUE(w.Poll()) << "round " << round;
    for (size_t i = 0; i < kBlocks; ++i) {
      EXPECT_TRUE(w.result(i).ok())
          << "round " << round << " block " << i << ": " << w.result(i).ToString();
    }
    std::vector<std::vector<std::byte>> out(kBlocks, std::vector<std::byte>(kBlock));
    std::vector<ReadOp> reads;
    for (uint64_t i = 0; i < kBlocks; ++i) reads.push_back({blocks[i].first, out[i]});
    Completion r = tier_->Read(kNs, reads);
    const Status waited = r.WaitFor(kWait);
    ASSERT_TRUE(r.Poll()) << "no result within 5 s: " << waited.ToString();
    for (size_t i = 0; i < kBlocks; ++i) {
      EXPECT_TRUE(r.result(i).ok())
          << "round " << round << " block " << i << ": " << r.result(i).ToString();
      EXPECT_TRUE(out[i] == blocks[i].second) << "round " << round << " block " << i;
    }
  }
}

// A rewrite the server refuses leaves the stored copy where it was: it
// still counts in Usage, with its own size, and still reads back. The server
// gives one connection three quarters of its 16 slots (12), so the last item
// of a 13-item batch is refused. Before, the refused rewrite dropped the key
// from the count while its old copy stayed readable.
TEST_F(RemoteTierChannelTest, ARefusedRewriteKeepsTheStoredCopyCounted) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions&) {}));
  ASSERT_NO_FATAL_FAILURE(OpenTier(1));
  const BlockKey kept = TestKey(1000);
  const std::vector<std::byte> old_data = BlockBytes(kept, kBlock);
  Completion first = WriteBatch({{kept, old_data}});
  ASSERT_TRUE(first.Poll());
  ASSERT_TRUE(first.result(0).ok()) << first.result(0).ToString();

  std::vector<std::pair<BlockKey, std::vector<std::byte>>> blocks;
  for (uint64_t i = 0; i < 12; ++i) blocks.emplace_back(TestKey(i), BlockBytes(TestKey(i), kBlock));
  // Smaller than the stored copy: a wrong restore shows in used_bytes.
  blocks.emplace_back(kept, std::vector<std::byte>(kBlock / 2, std::byte{0x6B}));
  Completion w = WriteBatch(blocks);
  ASSERT_TRUE(w.Poll());
  for (size_t i = 0; i < 12; ++i) EXPECT_TRUE(w.result(i).ok()) << w.result(i).ToString();
  ASSERT_EQ(w.result(12).code(), StatusCode::kResourceExhausted) << w.result(12).ToString();

  const TierUsage u = tier_->Usage();
  EXPECT_EQ(u.blocks, 13u);
  EXPECT_EQ(u.used_bytes, 13 * kBlock);
  std::vector<std::byte> out(kBlock);
  ReadOp r{kept, out};
  Completion read = tier_->Read(kNs, std::span(&r, 1));
  ASSERT_TRUE(read.WaitFor(kWait).ok()) << read.status().ToString();
  EXPECT_TRUE(out == old_data) << "the stored copy reads back";
}

}  // namespace
}  // namespace kvtier::testing
