// An in-process kvtier-memd (16 slots of 64 KiB, tests/remote/memd_test_options.h)
// with options a test adjusts, and a remote tier on it as the well-behaved
// client, for the tests of what the server does against peers that stall,
// flood or break the protocol.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/tier.h"
#include "tests/remote/memd_test_options.h"
#include "tests/remote/raw_memd_client.h"
#include "tests/support/block_data.h"
#include "tiers/remote/memd_server.h"

namespace kvtier::testing {

class MemdGuardTest : public ::testing::Test {
 protected:
  static constexpr char kSecret[] = "guard-test-secret";
  static constexpr uint64_t kBlock = 32 << 10;
  static constexpr NamespaceId kNs{11};
  static constexpr auto kWait = std::chrono::seconds(5);

  void TearDown() override {
    if (tier_) tier_->Shutdown();
    if (server_) server_->Stop();
  }
  // Starts the server with SmallMemdOptions adjusted by `adjust`.
  void StartServer(const std::function<void(memd::MemdServerOptions&)>& adjust = {}) {
    memd::MemdServerOptions o = SmallMemdOptions(kSecret, "tcp");
    if (adjust) adjust(o);
    auto s = memd::MemdServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  // Opens the remote tier (one connection, `blocks` of capacity) on the server.
  void OpenTier(uint64_t blocks = 16) {
    const Status opened = TryOpenTier(blocks);
    ASSERT_TRUE(opened.ok()) << opened.ToString();
  }
  Status TryOpenTier(uint64_t blocks = 16) {
    TierOptions o;
    o.name = "guarded-remote";
    o.type = "remote";
    o.capacity_bytes = blocks * kBlock;
    o.servers = {"127.0.0.1:" + std::to_string(server_->port())};
    o.remote.secret = kSecret;
    o.remote.connections = 1;
    o.remote.reconnect_backoff_ms = 1;
    o.remote.reconnect_backoff_max_ms = 1;
    auto t = CreateTier(o, TierContext{kBlock, SystemClock(), StderrLogSink(LogLevel::kError)});
    if (!t.ok()) return t.status();
    tier_ = std::move(t).value();
    return Status::Ok();
  }
  // Writes block `i` through the tier.
  void Put(uint64_t i) {
    std::vector<std::byte> data = BlockBytes(TestKey(i), kBlock);
    WriteOp w{TestKey(i), data};
    Completion c = tier_->Write(kNs, std::span(&w, 1));
    ASSERT_TRUE(c.WaitFor(kWait).ok()) << c.status().ToString();
  }
  // Reads block `i` back through the tier and checks its bytes.
  void ExpectStored(uint64_t i) {
    std::vector<std::byte> out(kBlock);
    ReadOp r{TestKey(i), out};
    Completion c = tier_->Read(kNs, std::span(&r, 1));
    ASSERT_TRUE(c.WaitFor(kWait).ok()) << c.status().ToString();
    EXPECT_EQ(out, BlockBytes(TestKey(i), kBlock)) << "block " << i;
  }
  // Polls `done` every 5 ms for up to kWait.
  static bool Eventually(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + kWait;
    while (!done()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  std::unique_ptr<memd::MemdServer> server_;
  std::unique_ptr<Tier> tier_;
};

}  // namespace kvtier::testing
