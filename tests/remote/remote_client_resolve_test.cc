// The remote client with a server named by host name: the name is looked up
// on every connect, so a server that comes back at another address (a
// rescheduled pod behind the same name) is found again, and a lookup that
// fails keeps the last address. A test resolver stands in for DNS.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/remote/memd_test_options.h"
#include "tests/remote/scripted_memd.h"
#include "tests/support/time_scale.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/remote_client.h"
#include "tiers/remote/remote_client_impl.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{31};
constexpr char kSecret[] = "resolve-test-secret";
constexpr char kEntry[] = "memd.test.invalid:7400";
constexpr auto kWait = std::chrono::seconds(5);

// What the test's "DNS" answers for kEntry; an empty answer is a failed
// lookup. Shared with the client's lookups, which may outlive the test.
class FakeDns : public std::enable_shared_from_this<FakeDns> {
 public:
  void Point(const std::string& answer) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = answer;
  }
  // While held, lookups wait (a DNS server that does not answer).
  void Hold(bool held) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = held;
    cv_.notify_all();
  }
  size_t lookups() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lookups_;
  }
  // Waits up to 5 s for more than `n` lookups to have been asked.
  bool WaitForMoreThan(size_t n) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return lookups_ > n; });
  }
  memd::RemoteClientOptions::Resolve Resolver() {
    return [self = shared_from_this()](const std::string& entry) -> Result<std::string> {
      std::unique_lock<std::mutex> lock(self->mu_);
      ++self->lookups_;
      self->cv_.notify_all();
      self->cv_.wait(lock, [&] { return !self->held_; });
      if (entry != kEntry || self->answer_.empty()) return Status::NotFound("no such host");
      return self->answer_;
    };
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::string answer_;
  bool held_ = false;
  size_t lookups_ = 0;
};

std::unique_ptr<memd::MemdServer> StartMemd() {
  auto s = memd::MemdServer::Start(SmallMemdOptions(kSecret, "tcp"));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::string Address(const memd::MemdServer& s) { return "127.0.0.1:" + std::to_string(s.port()); }

memd::RemoteClientOptions NamedOptions(FakeDns& dns) {
  memd::RemoteClientOptions o;
  o.servers = {kEntry};
  o.secret = kSecret;
  o.connections = 1;
  o.connect_timeout_ms = 1000;
  o.op_timeout_ms = 2000;
  o.reconnect_backoff_ms = 1;
  o.reconnect_backoff_max_ms = 1;
  o.resolve = dns.Resolver();
  return o;
}

// One PUT of a 1 KiB block; its status.
Status PutOne(memd::RemoteClient& client, uint64_t key) {
  std::vector<std::byte> payload(1024, std::byte{static_cast<unsigned char>(key)});
  ItemResults put(1);
  client.Put(0, kNs, {{BlockKey{key, key}, payload, std::nullopt}}, put.Done());
  if (!put.WaitFor(kWait)) return Status::DeadlineExceeded("no PUT result within 5 s");
  return put.status(0);
}

// PutOne until it succeeds or 5 s have passed, 5 ms apart: a connection
// just lost backs off for 1 ms, during which requests fail at once.
Status PutOneRetrying(memd::RemoteClient& client, uint64_t key) {
  const auto end = std::chrono::steady_clock::now() + kWait;
  Status put = PutOne(client, key);
  while (!put.ok() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    put = PutOne(client, key);
  }
  return put;
}

// EXISTS of one block; its status.
Status ExistsOne(memd::RemoteClient& client, uint64_t key) {
  ItemResults exists(1);
  client.Exists(0, kNs, {BlockKey{key, key}}, exists.Done());
  if (!exists.WaitFor(kWait)) return Status::DeadlineExceeded("no EXISTS result within 5 s");
  return exists.status(0);
}

// The server behind the name stops and another comes up at a new address:
// after the failures the lost connection brings, the client reaches the new
// one. Before, the address looked up at open was used for good, and every
// request failed until the engine restarted.
TEST(RemoteClientResolveTest, ANamedServerThatMovesIsFoundAtItsNewAddress) {
  auto first = StartMemd();
  auto second = StartMemd();
  ASSERT_TRUE(first && second);
  auto dns = std::make_shared<FakeDns>();
  dns->Point(Address(*first));
  auto c = memd::RemoteClient::Create(NamedOptions(*dns), StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  memd::RemoteClient& client = **c;
  ASSERT_TRUE(PutOne(client, 1).ok());
  ASSERT_TRUE(ExistsOne(client, 1).ok());

  first->Stop();
  dns->Point(Address(*second));
  // The connection to the stopped server fails what is on it; a later
  // request reconnects through a fresh lookup.
  const Status put = PutOneRetrying(client, 2);
  ASSERT_TRUE(put.ok()) << put.ToString();
  EXPECT_TRUE(ExistsOne(client, 2).ok());
  // The new server is empty: block 1 stayed with the old one.
  EXPECT_EQ(ExistsOne(client, 1).code(), StatusCode::kNotFound);
  client.Shutdown();
}

// A kvtier-memd at `server`'s address, `server` stopped: the client's
// connection is lost and its next one reaches the same address.
std::unique_ptr<memd::MemdServer> RestartAt(memd::MemdServer& server) {
  server.Stop();
  auto restart = SmallMemdOptions(kSecret, "tcp");
  restart.listen = Address(server);
  auto s = memd::MemdServer::Start(restart);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// A client that has reached a named server once: looked up at open and at
// the first connect. The tests then change the DNS and restart the server at
// the same address, so the next request reconnects.
class ReachedNamedServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartMemd();
    ASSERT_TRUE(server_);
    dns_->Point(Address(*server_));
    auto c =
        memd::RemoteClient::Create(NamedOptions(*dns_), StderrLogSink(LogLevel::kError), nullptr);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
    ASSERT_TRUE(PutOne(*client_, 3).ok());
    ASSERT_TRUE(dns_->WaitForMoreThan(1));
    lookups_before_ = dns_->lookups();
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    dns_->Hold(false);  // a lookup still waiting answers a client that is gone
    if (server_) server_->Stop();
  }
  void Restart() {
    server_ = RestartAt(*server_);
    ASSERT_TRUE(server_);
  }

  std::shared_ptr<FakeDns> dns_ = std::make_shared<FakeDns>();
  std::unique_ptr<memd::MemdServer> server_;
  std::unique_ptr<memd::RemoteClient> client_;
  size_t lookups_before_ = 0;
};

// A lookup that fails on reconnect (a DNS outage) keeps the last address:
// the server that is still there stays reachable.
TEST_F(ReachedNamedServerTest, AFailedLookupKeepsTheLastAddress) {
  dns_->Point("");
  ASSERT_NO_FATAL_FAILURE(Restart());
  const Status put = PutOneRetrying(*client_, 4);
  EXPECT_TRUE(put.ok()) << put.ToString();
  EXPECT_TRUE(dns_->WaitForMoreThan(lookups_before_));  // the reconnect asked, and was refused
}

// A DNS server that does not answer holds up neither reconnects (they go to
// the last address) nor shutdown. Before, the lookup ran on the client's
// loop: the connect waited for it past its deadline, and shutdown for the
// lookup to end.
TEST_F(ReachedNamedServerTest, ALookupThatDoesNotAnswerHoldsNothingUp) {
  dns_->Hold(true);
  ASSERT_NO_FATAL_FAILURE(Restart());
  const Status put = PutOneRetrying(*client_, 7);
  EXPECT_TRUE(put.ok()) << put.ToString();
  EXPECT_TRUE(dns_->WaitForMoreThan(lookups_before_));  // a lookup is waiting
  const auto start = std::chrono::steady_clock::now();
  client_->Shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(std::chrono::seconds(2)));
}

// Without a test resolver the system's looks the name up, off the caller's
// thread, on every connect.
TEST(RemoteClientResolveTest, TheSystemResolverFindsLocalhost) {
  auto server = StartMemd();
  ASSERT_TRUE(server);
  auto unused = std::make_shared<FakeDns>();
  memd::RemoteClientOptions o = NamedOptions(*unused);
  o.resolve = nullptr;
  o.servers = {"localhost:" + std::to_string(server->port())};
  auto c = memd::RemoteClient::Create(o, StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(PutOne(**c, 5).ok());
  EXPECT_TRUE(ExistsOne(**c, 5).ok());
  (*c)->Shutdown();
}

// A name that cannot be looked up at open is refused with the entry named;
// so is an entry with no port.
TEST(RemoteClientResolveTest, ANameThatDoesNotResolveAtOpenIsRefused) {
  auto dns = std::make_shared<FakeDns>();  // answers nothing
  auto c = memd::RemoteClient::Create(NamedOptions(*dns), StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(kEntry), std::string::npos) << c.status().ToString();

  memd::RemoteClientOptions o = NamedOptions(*dns);
  o.servers = {"memd.test.invalid"};
  auto bad = memd::RemoteClient::Create(o, StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not host:port"), std::string::npos)
      << bad.status().ToString();
}

// Only a host that is not an IP literal (v4 or v6) is looked up again.
TEST(RemoteClientResolveTest, OnlyNamesAreLookedUpAgain) {
  EXPECT_TRUE(memd::IsNamedHost("memd.test.invalid:7400"));
  EXPECT_TRUE(memd::IsNamedHost("localhost:7400"));
  EXPECT_FALSE(memd::IsNamedHost("127.0.0.1:7400"));
  EXPECT_FALSE(memd::IsNamedHost("::1:7400"));
  EXPECT_FALSE(memd::IsNamedHost("fd00::5:7400"));
  EXPECT_FALSE(memd::IsNamedHost("[fd00::5]:7400"));
  EXPECT_FALSE(memd::IsNamedHost("[::1]:7400"));
}

}  // namespace
}  // namespace kvtier::testing
