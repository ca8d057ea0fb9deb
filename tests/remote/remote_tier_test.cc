#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "kvtier/build_config.h"
#include "kvtier/env.h"
#include "tests/remote/remote_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/recording_log.h"
#include "tests/support/tier_conformance.h"
#include "tiers/remote/rdma_transport.h"

namespace kvtier::testing {
namespace {

Result<std::unique_ptr<Tier>> MakeRemote(size_t servers, uint64_t capacity_blocks,
                                         uint64_t block_bytes) {
  auto procs = FreshMemd(servers);
  if (procs.size() != servers) return Status::Unavailable("kvtier-memd did not start");
  return CreateTier(RemoteOptions(procs, capacity_blocks * block_bytes), TierContext{block_bytes});
}

INSTANTIATE_TEST_SUITE_P(
    Remote, TierConformanceTest,
    ::testing::Values(
        TierMaker{"OneMemd", [](uint64_t c, uint64_t b) { return MakeRemote(1, c, b); }},
        TierMaker{"ThreeMemd", [](uint64_t c, uint64_t b) { return MakeRemote(3, c, b); }}),
    TierMakerName);

// A tier counting more blocks than its servers have slots would report
// blocks they evicted on their own as stored: its open says so, with the
// capacity that fits. (Each FreshMemd server: 32 MiB in 132 KiB slots.)
TEST(RemoteTierTest, ACapacityPastTheServersSlotsIsWarnedAbout) {
  auto procs = FreshMemd(1);
  ASSERT_EQ(procs.size(), 1u);
  constexpr uint64_t kBlock = 128 * 1024;
  constexpr uint64_t kSlots = (32 << 20) / (132 << 10);
  for (const uint64_t blocks : {kSlots, kSlots + 1}) {
    auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "slots in all");
    auto tier = CreateTier(RemoteOptions(procs, blocks * kBlock),
                           TierContext{kBlock, SystemClock(), log, {}});
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    const std::vector<std::string> lines = log->lines();
    if (blocks == kSlots) {
      EXPECT_TRUE(lines.empty()) << lines[0];
    } else {
      ASSERT_EQ(lines.size(), 1u);
      EXPECT_NE(lines[0].find("capacity holds " + std::to_string(blocks) +
                              " blocks, but its "
                              "kvtier-memd servers have " +
                              std::to_string(kSlots) + " slots in all"),
                std::string::npos)
          << lines[0];
      EXPECT_NE(lines[0].find("at most " + std::to_string(kSlots * kBlock) + " bytes"),
                std::string::npos)
          << lines[0];
    }
    (*tier)->Shutdown();
  }
}

TEST(RemoteTierTest, ManyRequestsInFlightOnFewConnections) {
  auto procs = FreshMemd(1);
  ASSERT_EQ(procs.size(), 1u);
  TierOptions o = RemoteOptions(procs, 256 * 4096);
  o.remote.connections = 2;
  auto tier = CreateTier(o, TierContext{4096});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  constexpr NamespaceId kNs{3};
  // 64 single-block batches issued before any is waited on.
  std::vector<std::vector<std::byte>> data;
  std::vector<Completion> writes;
  for (uint64_t i = 0; i < 64; ++i) data.push_back(BlockBytes(TestKey(i), 4096));
  for (uint64_t i = 0; i < 64; ++i) {
    WriteOp op{TestKey(i), data[i]};
    writes.push_back((*tier)->Write(kNs, std::span(&op, 1)));
  }
  for (auto& w : writes) ASSERT_TRUE(w.Wait().ok()) << w.status().ToString();
  std::vector<std::vector<std::byte>> out(64, std::vector<std::byte>(4096));
  std::vector<Completion> reads;
  for (uint64_t i = 0; i < 64; ++i) {
    ReadOp op{TestKey(i), out[i]};
    reads.push_back((*tier)->Read(kNs, std::span(&op, 1)));
  }
  for (uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(reads[i].Wait().ok()) << reads[i].status().ToString();
    EXPECT_EQ(out[i], data[i]) << i;
  }
  (*tier)->Shutdown();
}

// A second client of the same servers (another process's tier) finds the
// blocks the first wrote; once the runtime adopts them (Claim) it counts
// them in its usage, once each, and only those its servers hold.
TEST(RemoteTierTest, ClaimCountsBlocksAnotherClientWrote) {
  auto procs = FreshMemd(2);
  ASSERT_EQ(procs.size(), 2u);
  const TierOptions o = RemoteOptions(procs, 64 * 4096);
  auto writer = CreateTier(o, TierContext{4096});
  auto adopter = CreateTier(o, TierContext{4096});
  ASSERT_TRUE(writer.ok() && adopter.ok());
  constexpr NamespaceId kNs{5};
  std::vector<std::vector<std::byte>> data;
  std::vector<WriteOp> ops;
  for (uint64_t i = 0; i < 3; ++i) data.push_back(BlockBytes(TestKey(i), 4096));
  for (uint64_t i = 0; i < 3; ++i) ops.push_back({TestKey(i), data[i]});
  ASSERT_TRUE((*writer)->Write(kNs, ops).Wait().ok());
  const std::vector<BlockKey> keys = {TestKey(0), TestKey(1), TestKey(2)};
  Completion c = (*adopter)->Contains(kNs, keys);
  ASSERT_TRUE(c.Wait().ok());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(c.result(i).ok()) << i;
  EXPECT_EQ((*adopter)->Usage().blocks, 0u);
  (*adopter)->Claim(kNs, keys);
  (*adopter)->Claim(kNs, keys);  // twice: counted once
  EXPECT_EQ((*adopter)->Usage().blocks, 3u);
  EXPECT_EQ((*adopter)->Usage().used_bytes, 3u * 4096);
  // Removing one there frees its room in the adopter's count.
  ASSERT_TRUE((*adopter)->Remove(kNs, std::span(keys).first(1)).Wait().ok());
  EXPECT_EQ((*adopter)->Usage().blocks, 2u);
  std::vector<std::byte> out(4096);
  ReadOp rd{TestKey(0), out};
  Completion r = (*writer)->Read(kNs, std::span(&rd, 1));
  (void)r.Wait();
  EXPECT_EQ(r.result(0).code(), StatusCode::kNotFound);
  (*writer)->Shutdown();
  (*adopter)->Shutdown();
}

TEST(RemoteTierTest, WrongSecretIsRefusedAtOpen) {
  auto procs = FreshMemd(1);
  ASSERT_EQ(procs.size(), 1u);
  TierOptions o = RemoteOptions(procs, 1 << 20);
  o.remote.secret = "not the secret";
  auto tier = CreateTier(o, TierContext{4096});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().ToString(), "invalid_argument: tier 'remote': remote server " +
                                          procs[0]->endpoint() + ": authentication failed");
}

TEST(RemoteTierTest, BlockLargerThanServerSlotsIsRefusedAtOpen) {
  auto procs = FreshMemd(1);
  ASSERT_EQ(procs.size(), 1u);
  auto tier = CreateTier(RemoteOptions(procs, 64 << 20), TierContext{1 << 20});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tier.status().message().find("do not fit the 135168-byte slots"), std::string::npos)
      << tier.status().ToString();
}

TEST(RemoteTierTest, RdmaTransportWithoutDeviceNamesTheFallback) {
  const auto device = internal::memd::OpenRdmaDevice();
  if (device.ok()) GTEST_SKIP() << "an RDMA device is present";
  auto procs = FreshMemd(1);
  ASSERT_EQ(procs.size(), 1u);
  TierOptions o = RemoteOptions(procs, 1 << 20);
  o.remote.transport = "rdma";
  auto tier = CreateTier(o, TierContext{4096});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(tier.status().message().find("use transport: tcp"), std::string::npos)
      << tier.status().ToString();
  // The device's own reason, under the tier's name, as the server gives it.
  EXPECT_EQ(tier.status().message(), "tier 'remote': " + std::string(device.status().message()));
}

TEST(RemoteTierTest, MemdStopsCleanlyOnSigterm) {
  auto p = MemdProcess::Start();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->Terminate(), 0);
}

TEST(RemoteTierTest, MemdRdmaTransportFailsAtStartWithoutDevice) {
  if (internal::memd::OpenRdmaDevice().ok()) GTEST_SKIP() << "an RDMA device is present";
  MemdProcessOptions o;
  o.extra_args = {"--transport", "rdma"};
  auto p = MemdProcess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "kvtier-memd exited at start (status 256)");
}

TEST(RemoteTierTest, MemdTakesALeaseWithinItsRange) {
  MemdProcessOptions ok;
  ok.extra_args = {"--lease-ms", "500"};
  auto p = MemdProcess::Start(ok);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->Terminate(), 0);

  MemdProcessOptions too_long;
  too_long.extra_args = {"--lease-ms", "60001"};
  auto q = MemdProcess::Start(too_long);
  ASSERT_FALSE(q.ok());
  // exit(2): the options are refused before anything is mapped or bound.
  EXPECT_EQ(q.status().message(), "kvtier-memd exited at start (status 512)");
}

// This binary is built only with the remote tier, and build_config.h says so;
// RDMA, one of its transports, is never recorded without it.
TEST(RemoteTierTest, BuildConfigRecordsTheRemoteTier) {
  EXPECT_EQ(KVTIER_HAVE_REMOTE, 1);
  static_assert(!KVTIER_HAVE_RDMA || KVTIER_HAVE_REMOTE, "RDMA is built only with the remote tier");
}

// Waits (up to 5 s) until the child `pid` has ended, leaving it unreaped.
bool EndedWithin5s(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    siginfo_t info{};
    if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A server that crashed (or that a sanitizer ended after a report) fails the
// test that owns it, whether it is destroyed or restarted.
TEST(RemoteTierTest, MemdThatCrashedFailsTheTestWhenStopped) {
  auto p = MemdProcess::Start();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::unique_ptr<MemdProcess> memd = std::move(p).value();
  ASSERT_EQ(kill(memd->pid(), SIGSEGV), 0);
  ASSERT_TRUE(EndedWithin5s(memd->pid()));
  EXPECT_NONFATAL_FAILURE(memd.reset(), "ended on its own before the test stopped it");
}

TEST(RemoteTierTest, MemdThatCrashedFailsTheTestWhenRestarted) {
  auto p = MemdProcess::Start();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  MemdProcess& memd = **p;
  ASSERT_EQ(kill(memd.pid(), SIGKILL), 0);
  ASSERT_TRUE(EndedWithin5s(memd.pid()));
  Status restarted;
  EXPECT_NONFATAL_FAILURE(restarted = memd.Restart(), "killed by signal 9");
  // It still comes back, and a server the test stops itself fails nothing.
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  EXPECT_EQ(memd.Terminate(), 0);
}

}  // namespace
}  // namespace kvtier::testing
