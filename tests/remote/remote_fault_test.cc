// The remote tier and kvtier-memd under faults: a server killed during a
// batch, a server that is down from the start, and clients that send
// garbage, oversized or half frames or the wrong secret.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "tests/remote/raw_memd_client.h"
#include "tests/remote/remote_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/recording_log.h"
#include "tests/support/time_scale.h"
#include "tiers/remote/rdma_protocol.h"
#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_protocol.h"
#include "tiers/remote/remote_routing.h"

namespace kvtier::testing {
namespace {

namespace memd = internal::memd;
constexpr NamespaceId kNs{77};
constexpr uint64_t kBlock = 16 * 1024;

// Writes and reads back one block through `tier`: the server still serves.
void ExpectServing(Tier& tier, uint64_t i) {
  std::vector<std::byte> data = BlockBytes(TestKey(i), kBlock);
  WriteOp w{TestKey(i), data};
  ASSERT_TRUE(tier.Write(kNs, std::span(&w, 1)).Wait().ok());
  std::vector<std::byte> out(kBlock);
  ReadOp r{TestKey(i), out};
  ASSERT_TRUE(tier.Read(kNs, std::span(&r, 1)).Wait().ok());
  EXPECT_EQ(out, data);
}

class MemdAbuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    procs_ = FreshMemd(1);
    ASSERT_EQ(procs_.size(), 1u);
    auto t = CreateTier(RemoteOptions(procs_, 64 * kBlock), TierContext{kBlock});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
    ExpectServing(*tier_, 0);
  }
  void TearDown() override {
    if (tier_) {
      ExpectServing(*tier_, 1);  // the well-behaved client was never disturbed
      tier_->Shutdown();
    }
  }
  uint16_t port() const { return procs_[0]->port(); }
  std::vector<MemdProcess*> procs_;
  std::unique_ptr<Tier> tier_;
};

TEST_F(MemdAbuseTest, GarbageBytesGetAnErrorAndAClose) {
  RawClient c(port());
  ASSERT_TRUE(c.connected());
  std::vector<std::byte> junk(64, std::byte{0x5A});
  c.Send(junk);
  c.ExpectError("bad frame magic");
}

TEST_F(MemdAbuseTest, OversizedFrameIsRefusedBeforeItsBody) {
  RawClient c(port());
  memd::FrameHeaderBytes h = memd::EncodeFrameHeader({memd::Opcode::kHello, 0, 1, 1u << 30});
  c.Send(h);
  c.ExpectError("frame body of 1073741824 bytes exceeds the limit of 131072");
}

TEST_F(MemdAbuseTest, HalfAFrameThenHangUpClosesQuietly) {
  RawClient c(port());
  auto hello = memd::Frame(memd::Opcode::kHello, 1, memd::EncodeBody(memd::Hello{}));
  c.Send(std::span(hello).first(hello.size() / 2));
  ExpectServing(*tier_, 2);  // a stalled half frame blocks nobody
  c.ShutdownWrite();
  EXPECT_TRUE(c.SeesEof());
}

TEST_F(MemdAbuseTest, RequestsBeforeTheHandshakeAreRefused) {
  RawClient c(port());
  c.Send(memd::Frame(memd::Opcode::kGet, 1, memd::EncodeBody(memd::KeyBatch{kNs, {TestKey(0)}})));
  c.ExpectError("handshake expected (HELLO, then AUTH)");
}

TEST_F(MemdAbuseTest, WrongProofGetsNothingButAnError) {
  RawClient c(port());
  memd::Hello hello;
  hello.nonce = memd::RandomNonce();
  c.Send(memd::Frame(memd::Opcode::kHello, 1, memd::EncodeBody(hello)));
  auto ch = c.ReadFrame();
  ASSERT_TRUE(ch.has_value());
  ASSERT_EQ(ch->first.opcode, memd::Opcode::kChallenge);
  auto challenge = memd::DecodeChallenge(ch->second);
  ASSERT_TRUE(challenge.ok());
  memd::Auth auth{memd::ClientProof("wrong secret", challenge->nonce, hello.nonce)};
  c.Send(memd::Frame(memd::Opcode::kAuth, 1, memd::EncodeBody(auth)));
  c.ExpectError("authentication failed");
}

TEST_F(MemdAbuseTest, RdmaFramesOnATcpServerAreRefusedByName) {
  RawClient c(port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, procs_[0]->secret()));
  memd::RdmaHello hello{{0x11, 1, {}, 0x22}};
  c.Send(memd::Frame(memd::Opcode::kRdmaHello, 2, memd::EncodeBody(hello)));
  c.ExpectError("this kvtier-memd serves transport: tcp only; RDMA frames are refused");
}

TEST_F(MemdAbuseTest, MalformedBatchAfterHandshakeIsRefused) {
  RawClient c(port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, procs_[0]->secret()));
  // A PUT_DATA for an item no PUT_BEGIN granted.
  std::vector<std::byte> data(kBlock + kBlockHeaderBytes);
  c.Send(memd::Frame(memd::Opcode::kPutData, 9, data, 3));
  c.ExpectError("PUT_DATA names no PUT_BEGIN item");
}

// Keys of `n` blocks split by the server rendezvous hashing sends them to.
std::vector<size_t> Owners(const TierOptions& o, uint64_t n) {
  std::vector<uint64_t> ids;
  for (const std::string& s : o.servers) ids.push_back(memd::ServerId(s));
  std::vector<size_t> owner;
  for (uint64_t i = 0; i < n; ++i) owner.push_back(memd::PickServer(kNs, TestKey(i), ids));
  return owner;
}

TEST(RemoteFaultTest, KillDuringABatchFailsOnlyThatServersBlocksThenItRejoins) {
  auto procs = FreshMemd(3);
  ASSERT_EQ(procs.size(), 3u);
  TierOptions o = RemoteOptions(procs, 256 * kBlock);
  o.remote.op_timeout_ms = 1500;
  // What the tier reports lost when it sees the server restarted empty.
  std::mutex lost_mu;
  std::set<uint64_t> lost;
  TierContext context{kBlock};
  context.copies_lost = [&](NamespaceId ns, std::span<const BlockKey> keys) {
    std::lock_guard lock(lost_mu);
    for (const BlockKey& k : keys) {
      for (uint64_t i = 0; i < 64; ++i) {
        if (ns == kNs && k == TestKey(i)) lost.insert(i);
      }
    }
  };
  auto made = CreateTier(o, context);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Tier& tier = **made;
  constexpr uint64_t kN = 48;
  std::vector<size_t> owner = Owners(o, kN);
  size_t on_victim = 0;
  for (size_t s : owner) on_victim += s == 1;
  ASSERT_GT(on_victim, 0u);
  std::vector<std::vector<std::byte>> data;
  std::vector<WriteOp> writes;
  for (uint64_t i = 0; i < kN; ++i) data.push_back(BlockBytes(TestKey(i), kBlock));
  for (uint64_t i = 0; i < kN; ++i) writes.push_back({TestKey(i), data[i]});
  ASSERT_TRUE(tier.Write(kNs, writes).Wait().ok());

  // Server 1 freezes, the batch goes out, then server 1 is killed under it.
  procs[1]->Pause();
  std::vector<std::vector<std::byte>> out(kN, std::vector<std::byte>(kBlock));
  std::vector<ReadOp> reads;
  for (uint64_t i = 0; i < kN; ++i) reads.push_back({TestKey(i), out[i]});
  const auto start = std::chrono::steady_clock::now();
  Completion r = tier.Read(kNs, reads);
  procs[1]->Kill();
  // By the request deadline, with a second's room, stretched for a sanitizer
  // build on a busy host.
  const auto limit = Scaled(std::chrono::milliseconds(o.remote.op_timeout_ms + 1000));
  ASSERT_TRUE(r.WaitFor(limit).ok() || r.Poll());
  EXPECT_LT(std::chrono::steady_clock::now() - start, limit);
  for (uint64_t i = 0; i < kN; ++i) {
    if (owner[i] == 1) {
      EXPECT_TRUE(r.result(i).code() == StatusCode::kUnavailable ||
                  r.result(i).code() == StatusCode::kDeadlineExceeded)
          << r.result(i).ToString();
    } else {
      EXPECT_TRUE(r.result(i).ok()) << i << ": " << r.result(i).ToString();
      EXPECT_EQ(out[i], data[i]) << i;
    }
  }
  EXPECT_EQ(r.ok_count(), kN - on_victim);

  // Restarted empty on the same port, the server rejoins after the backoff.
  ASSERT_TRUE(procs[1]->Restart().ok());
  uint64_t key = 0;
  while (owner[key] != 1) ++key;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Status st;
  do {
    st = tier.Write(kNs, std::span(&writes[key], 1)).Wait();
    if (!st.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (!st.ok() && std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < kN; ++i) keys.push_back(TestKey(i));
  Completion c = tier.Contains(kNs, keys);
  ASSERT_TRUE(c.WaitFor(std::chrono::seconds(3)).ok() || c.Poll());
  for (uint64_t i = 0; i < kN; ++i) {
    const bool present = owner[i] != 1 || i == key;
    EXPECT_EQ(c.result(i).code(), present ? StatusCode::kOk : StatusCode::kNotFound) << i;
  }
  EXPECT_EQ(tier.Usage().blocks, kN - on_victim + 1) << "the lost blocks left the count";
  tier.Shutdown();
  // Each block the server held is reported lost, so the runtime forgets it;
  // `key`, whose write revealed the restart, may be (its write was in
  // flight then, and landed on the new server).
  std::lock_guard lock(lost_mu);
  lost.erase(key);
  std::set<uint64_t> on_it;
  for (uint64_t i = 0; i < kN; ++i) {
    if (owner[i] == 1 && i != key) on_it.insert(i);
  }
  EXPECT_EQ(lost, on_it);
}

TEST(RemoteFaultTest, ServerDownFromTheStartFailsOnlyItsKeys) {
  auto procs = FreshMemd(1);
  ASSERT_EQ(procs.size(), 1u);
  // A port that nothing listens on: a fresh server started and stopped.
  auto gone = MemdProcess::Start();
  ASSERT_TRUE(gone.ok());
  const std::string dead = (*gone)->endpoint();
  (*gone)->Kill();
  TierOptions o = RemoteOptions(procs, 256 * kBlock);
  o.servers.push_back(dead);
  auto made = CreateTier(o, TierContext{kBlock});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::vector<size_t> owner = Owners(o, 32);
  std::vector<std::vector<std::byte>> data;
  std::vector<WriteOp> writes;
  for (uint64_t i = 0; i < 32; ++i) data.push_back(BlockBytes(TestKey(i), kBlock));
  for (uint64_t i = 0; i < 32; ++i) writes.push_back({TestKey(i), data[i]});
  Completion w = (*made)->Write(kNs, writes);
  ASSERT_TRUE(w.WaitFor(std::chrono::seconds(3)).ok() || w.Poll());
  for (uint64_t i = 0; i < 32; ++i) {
    EXPECT_EQ(w.result(i).code(), owner[i] == 1 ? StatusCode::kUnavailable : StatusCode::kOk)
        << i << ": " << w.result(i).ToString();
  }
  (*made)->Shutdown();
}

// A server restarted with another secret: every connection attempt fails,
// and the log says why once (not once per attempt), where before it said
// only that the connection was lost.
TEST(RemoteFaultTest, AServerBackWithAnotherSecretIsLoggedOnce) {
  auto proc = MemdProcess::Start();
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  MemdProcess& server = **proc;
  TierOptions o = RemoteOptions({&server}, 64 * kBlock);
  o.remote.reconnect_backoff_ms = 10;
  o.remote.reconnect_backoff_max_ms = 20;
  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "remote server");
  auto made = CreateTier(o, TierContext{kBlock, SystemClock(), log, {}});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Tier& tier = **made;
  ExpectServing(tier, 0);

  std::ofstream(server.secret_file(), std::ios::trunc) << "another secret\n";
  ASSERT_TRUE(server.Restart().ok());
  auto mentions_proof = [&] {
    size_t n = 0;
    for (const std::string& line : log->lines()) {
      n += line.find("cannot connect (retrying)") != std::string::npos &&
           line.find("authentication") != std::string::npos;
    }
    return n;
  };
  const std::vector<std::byte> data = BlockBytes(TestKey(1), kBlock);
  WriteOp w{TestKey(1), data};
  const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(5));
  while (mentions_proof() == 0 && std::chrono::steady_clock::now() < deadline) {
    EXPECT_FALSE(tier.Write(kNs, std::span(&w, 1)).Wait().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(mentions_proof(), 1u) << "no line says why the server is refused";
  for (int i = 0; i < 10; ++i) {  // many more attempts, each refused alike
    EXPECT_FALSE(tier.Write(kNs, std::span(&w, 1)).Wait().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  EXPECT_EQ(mentions_proof(), 1u);
  tier.Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
