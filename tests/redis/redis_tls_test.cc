// The Redis tier over TLS, against real redis-server processes listening on
// a TLS port beside their plain one, with certificates the test makes: the
// conformance suite, large blocks byte for byte, certificate and name
// verification, client certificates, a server that does not speak TLS (and
// a client that does not), handshakes and replies that never come,
// connections the server closes while idle, and a cluster over TLS.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "tests/redis/redis_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/idle_listener.h"
#include "tests/support/returns_within.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_certs.h"
#include "tests/support/tier_conformance.h"
#include "tests/support/time_scale.h"
#include "tiers/redis/redis_connection.h"

namespace kvtier::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr NamespaceId kNs{0x715};
constexpr uint64_t kBlock = 1 << 20;

// Certificates made once per test process, in a directory removed at exit.
const TestPki* SharedPki(std::string* why) {
  static ScratchDir dir("kvtier-tls-");
  static Result<TestPki> pki = MakeTestPki(dir.path());
  if (!pki.ok()) {
    *why = pki.status().ToString();
    return nullptr;
  }
  return &*pki;
}

// A server's TLS side with the test PKI's server certificate.
RedisServerTls ServerTls(const TestPki& pki, bool require_client_cert = false) {
  return RedisServerTls{pki.server.cert_file, pki.server.key_file, pki.ca_file,
                        require_client_cert};
}

Result<std::unique_ptr<RedisServer>> StartTlsServer(const TestPki& pki,
                                                    bool require_client_cert = false) {
  RedisServerOptions so;
  so.tls = ServerTls(pki, require_client_cert);
  return RedisServer::Start(so);
}

// A TLS server shared by the conformance tests; null with the reason in *why.
RedisServer* SharedTlsRedis(std::string* why) {
  static std::unique_ptr<RedisServer> server;
  static std::string failure;
  if (!server && failure.empty()) {
    const TestPki* pki = SharedPki(&failure);
    if (pki != nullptr) {
      auto s = StartTlsServer(*pki);
      if (s.ok()) {
        server = std::move(s).value();
      } else {
        failure = s.status().ToString();
      }
    }
  }
  *why = failure;
  return server.get();
}

// Tier options over TLS to `server` (a cluster seed with `cluster`),
// trusting the test PKI's CA.
TierOptions TlsOptions(const RedisServer& server, const TestPki& pki, uint64_t capacity_bytes,
                       bool cluster = false) {
  TierOptions o = RedisTierOptionsFor({server.tls_endpoint()}, capacity_bytes, cluster);
  o.redis.tls = true;
  o.redis.tls_ca_file = pki.ca_file;
  return o;
}

Result<std::unique_ptr<Tier>> MakeTls(uint64_t capacity_blocks, uint64_t block_bytes) {
  std::string why;
  RedisServer* server = SharedTlsRedis(&why);
  if (server == nullptr) return Status::Unavailable(why);
  return MakeRedisTier(TlsOptions(*server, *SharedPki(&why), capacity_blocks * block_bytes),
                       block_bytes);
}

INSTANTIATE_TEST_SUITE_P(RedisTls, TierConformanceTest,
                         ::testing::Values(TierMaker{"Tls", MakeTls}), TierMakerName);

class RedisTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
    std::string why;
    pki_ = SharedPki(&why);
    ASSERT_NE(pki_, nullptr) << why;
    server_ = SharedTlsRedis(&why);
    ASSERT_NE(server_, nullptr) << why;
    options_ = TlsOptions(*server_, *pki_, 64 * kBlock);
  }

  // Opens a tier on options_ and returns why it failed; OK when it opened.
  // The open must end within 5 s, whatever the server does.
  Status OpenFails() {
    Status st;
    EXPECT_TRUE(ReturnsWithin(
        [&] {
          auto t = MakeRedisTier(options_, kBlock);
          st = t.status();
        },
        Scaled(milliseconds(5000)), "opening a TLS redis tier"));
    return st;
  }

  // Writes blocks first..first+count-1 in one batch and reads them back in
  // another, comparing every byte.
  void RoundTrip(Tier& tier, uint64_t first, size_t count) {
    std::vector<std::vector<std::byte>> data;
    std::vector<WriteOp> writes;
    for (size_t i = 0; i < count; ++i) data.push_back(BlockBytes(TestKey(first + i), kBlock));
    for (size_t i = 0; i < count; ++i) writes.push_back({TestKey(first + i), data[i]});
    ASSERT_TRUE(tier.Write(kNs, writes).Wait().ok());
    std::vector<std::vector<std::byte>> out(count, std::vector<std::byte>(kBlock));
    std::vector<ReadOp> reads;
    for (size_t i = 0; i < count; ++i) reads.push_back({TestKey(first + i), out[i]});
    Completion c = tier.Read(kNs, reads);
    ASSERT_TRUE(c.Wait().ok());
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ(c.bytes(i), kBlock);
      EXPECT_TRUE(out[i] == data[i]) << "block " << first + i << " came back changed";
    }
  }

  const TestPki* pki_ = nullptr;
  RedisServer* server_ = nullptr;
  TierOptions options_;
};

TEST_F(RedisTlsTest, BatchesOfLargeBlocksRoundTripByteForByte) {
  auto tier = OpenRedisTier(options_, kBlock);
  ASSERT_NE(tier, nullptr);
  RoundTrip(*tier, 0, 16);  // 16 MiB each way: many records, partial writes
  RoundTrip(*tier, 100, 1);
  tier->Shutdown();
}

TEST_F(RedisTlsTest, ServerNameComesFromTheEntryOrTlsServerName) {
  // By IP address (the certificate names 127.0.0.1): the conformance tests.
  // By name, sent as SNI: the certificate names redis.test.
  options_.redis.tls_server_name = "redis.test";
  auto tier = OpenRedisTier(options_, kBlock);
  ASSERT_NE(tier, nullptr);
  RoundTrip(*tier, 0, 2);
  tier->Shutdown();
  // A name the certificate does not carry is refused, saying which.
  options_.redis.tls_server_name = "other.test";
  Status st = OpenFails();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("certificate verify failed"), std::string_view::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("does not name 'other.test'"), std::string_view::npos)
      << st.ToString();
}

TEST_F(RedisTlsTest, CertificateFromAnotherCaIsRefused) {
  options_.redis.tls_ca_file = pki_->other_ca_file;
  Status st = OpenFails();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("certificate verify failed"), std::string_view::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("check tls_ca_file"), std::string_view::npos) << st.ToString();
}

TEST_F(RedisTlsTest, ClusterIsReachedAtTheTlsPortsItsNodesAnnounce) {
  auto cluster = RedisCluster::Start(3, ServerTls(*pki_));
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  // One seed: the other masters come from CLUSTER SLOTS asked over TLS,
  // which names their TLS ports.
  auto tier =
      OpenRedisTier(TlsOptions((*cluster)->node(0), *pki_, 64 * kBlock, /*cluster=*/true), kBlock);
  ASSERT_NE(tier, nullptr);
  RoundTrip(*tier, 0, 30);
  int total = 0;
  for (size_t i = 0; i < (*cluster)->size(); ++i) {
    auto keys = (*cluster)->node(i).Command({"DBSIZE"});
    ASSERT_TRUE(keys.ok()) << keys.status().ToString();
    EXPECT_GT(std::stoi(*keys), 0) << "node " << i << " holds none of the blocks";
    total += std::stoi(*keys);
  }
  EXPECT_EQ(total, 30);
  tier->Shutdown();
}

TEST_F(RedisTlsTest, ClientCertificateWhenTheServerRequiresOne) {
  auto strict = StartTlsServer(*pki_, /*require_client_cert=*/true);
  ASSERT_TRUE(strict.ok()) << strict.status().ToString();
  options_ = TlsOptions(**strict, *pki_, 64 * kBlock);
  // The server's alert says why; when the close overtakes it (a reset
  // drops unread bytes), the hint still names the fix.
  Status without = OpenFails();
  EXPECT_FALSE(without.ok());
  EXPECT_NE(without.message().find("tls_cert_file"), std::string_view::npos) << without.ToString();
  options_.redis.tls_cert_file = pki_->client.cert_file;
  options_.redis.tls_key_file = pki_->client.key_file;
  auto tier = OpenRedisTier(options_, kBlock);
  ASSERT_NE(tier, nullptr);
  RoundTrip(*tier, 0, 2);
  tier->Shutdown();
}

TEST_F(RedisTlsTest, FilesThatCannotBeUsedAreRefusedAtOpen) {
  ScratchDir dir("kvtier-tls-bad-");
  struct Case {
    std::string ca, cert, key, expect;
  };
  const Case cases[] = {
      {dir.path() + "/missing.pem", "", "", "No such file"},
      {dir.Write("junk.pem", "not a certificate\n"), "", "", "expected PEM certificates"},
      {pki_->ca_file, pki_->client.cert_file, pki_->server.key_file,
       "it is not the key of tls_cert_file"},
      // Must fail, not wait for a passphrase on the terminal.
      {pki_->ca_file, pki_->server.cert_file, pki_->encrypted_key_file, "without a passphrase"},
      {pki_->ca_file, pki_->client.cert_file, "", "tls_cert_file and tls_key_file"},
  };
  for (const Case& c : cases) {
    options_.redis.tls_ca_file = c.ca;
    options_.redis.tls_cert_file = c.cert;
    options_.redis.tls_key_file = c.key;
    Status st = OpenFails();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.expect << ": " << st.ToString();
    EXPECT_NE(st.message().find(c.expect), std::string_view::npos) << st.ToString();
  }
}

TEST_F(RedisTlsTest, PortThatDoesNotSpeakTlsFailsSayingSo) {
  // TLS to the plain port: the server answers the handshake in plain RESP.
  options_.servers = {server_->endpoint()};
  Status st = OpenFails();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("does the server take TLS on this port?"), std::string_view::npos)
      << st.ToString();
  // Plain RESP to the TLS port: the server drops the connection.
  options_.servers = {server_->tls_endpoint()};
  options_.redis.tls = false;
  options_.redis.tls_ca_file.clear();
  st = OpenFails();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("set tls: true"), std::string_view::npos) << st.ToString();
}

TEST_F(RedisTlsTest, HandshakeThatNeverCompletesEndsAtTheConnectTimeout) {
  // A listener nobody serves: the kernel completes the TCP connect, and the
  // server's half of the handshake never comes.
  IdleListener listener;
  ASSERT_NE(listener.port(), 0);
  options_.servers = {listener.endpoint()};
  options_.redis.connect_timeout_ms = 300;
  const auto start = Clock::now();
  Status st = OpenFails();
  const auto took = Clock::now() - start;
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("TLS handshake"), std::string_view::npos) << st.ToString();
  EXPECT_NE(st.message().find("timed out"), std::string_view::npos) << st.ToString();
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, Scaled(milliseconds(2000)));
}

TEST_F(RedisTlsTest, FrozenServerFailsReadsAndWritesWithinTheirDeadline) {
  auto own = StartTlsServer(*pki_);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  RedisServer& server = **own;
  options_ = TlsOptions(server, *pki_, 256 * kBlock);
  options_.redis.op_timeout_ms = 500;
  options_.redis.connections = 2;
  auto tier = OpenRedisTier(options_, kBlock);
  ASSERT_NE(tier, nullptr);
  // Writes and reads alternate between the two data connections: after a
  // round trip each is open, so the waits below are on open sessions.
  RoundTrip(*tier, 0, 1);
  server.Pause();
  // A read waits for a reply that never comes.
  std::vector<std::byte> out;
  auto start = Clock::now();
  Status read = ReadOneBlock(*tier, kNs, 0, kBlock, &out);
  EXPECT_EQ(read.code(), StatusCode::kUnavailable) << read.ToString();
  EXPECT_LT(Clock::now() - start, Scaled(milliseconds(500 + 1500)));
  // A 64 MiB batch fills the socket buffers the frozen server stopped
  // reading, and the send gives up once nothing moved for the timeout.
  std::vector<std::vector<std::byte>> data(64, BlockBytes(TestKey(7), kBlock));
  std::vector<WriteOp> writes;
  for (size_t i = 0; i < data.size(); ++i) writes.push_back({TestKey(10 + i), data[i]});
  start = Clock::now();
  Completion w = tier->Write(kNs, writes);
  ASSERT_NE(w.WaitFor(Scaled(std::chrono::seconds(10))).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w.result(0).code(), StatusCode::kUnavailable) << w.result(0).ToString();
  EXPECT_LT(Clock::now() - start, Scaled(milliseconds(500 + 2500)));
  server.Resume();
  // A new connection serves the block again, byte for byte.
  Status again;
  for (int i = 0; i < 40; ++i) {
    again = ReadOneBlock(*tier, kNs, 0, kBlock, &out);
    if (again.ok()) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_TRUE(out == BlockBytes(TestKey(0), kBlock));
  tier->Shutdown();
}

TEST_F(RedisTlsTest, ConnectionClosedWhileIdleIsReplacedBeforeUse) {
  auto tier = OpenRedisTier(options_, kBlock);
  ASSERT_NE(tier, nullptr);
  RoundTrip(*tier, 0, 1);
  auto tls = internal::TlsClientContext::Create({pki_->ca_file, "", ""});
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  auto ep = internal::ParseRedisEndpoint(server_->tls_endpoint());
  ASSERT_TRUE(ep.ok());
  auto conn = internal::RedisConnection::Open(*ep, options_.redis, tls->get());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_EQ((*conn)->tls_version(), "TLSv1.3");
  EXPECT_TRUE((*conn)->Reusable());  // session tickets taken in, nothing else
  // The server drops every client (as on its idle timeout) between jobs.
  auto killed = server_->Command({"CLIENT", "KILL", "TYPE", "normal"});
  ASSERT_TRUE(killed.ok()) << killed.status().ToString();
  ASSERT_NE(*killed, "0");
  const auto deadline = Clock::now() + Scaled(milliseconds(2000));
  while ((*conn)->Reusable() && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE((*conn)->broken());
  EXPECT_TRUE((*conn)->closed_by_peer());
  // The tier's connections were dropped too: the next read gets a new one.
  std::vector<std::byte> out;
  Status st = ReadOneBlock(*tier, kNs, 0, kBlock, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(out == BlockBytes(TestKey(0), kBlock));
  tier->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
