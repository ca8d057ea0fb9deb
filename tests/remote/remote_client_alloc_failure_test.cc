// The remote client queueing a PUT with one allocation of its loop's thread
// failing, for each in turn: the PUT is answered, and no byte of it goes out
// after that answer (its caller frees the payload at once). The connection
// used to keep frames that pointed into the payload of a PUT already failed
// back, and sent them from freed memory with the next request, or stopped
// writing altogether (its next request then timed out).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "kvtier/block_header.h"
#include "tests/core/alloc_failure.h"
#include "tests/remote/memd_test_options.h"
#include "tests/remote/scripted_memd.h"
#include "tests/support/block_data.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/remote_client_impl.h"

namespace kvtier::testing {
namespace {

constexpr char kSecret[] = "alloc-test-secret";
constexpr NamespaceId kNs{21};
constexpr uint64_t kBlock = 16 << 10;

TEST(RemoteClientAllocFailureTest, APutFailedWhileQueuedSendsNothingAfterItsAnswer) {
  auto started = memd::MemdServer::Start(SmallMemdOptions(kSecret, "tcp"));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<memd::MemdServer> server = std::move(started).value();
  memd::RemoteClientOptions o = OneConnectionTo(server->port(), kSecret, 3000);
  o.reconnect_backoff_ms = 1;
  o.reconnect_backoff_max_ms = 1;
  auto made = memd::RemoteClient::Create(o, StderrLogSink(LogLevel::kError), nullptr);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<memd::RemoteClient> client = std::move(made).value();
  auto& impl = static_cast<memd::ClientImpl&>(*client);
  ASSERT_TRUE(client->GetStats(0).ok());
  long n = 0;
  for (bool injected = true; injected && n < 400; ++n) {
    const BlockKey key = TestKey(static_cast<uint64_t>(n));
    auto payload = std::make_unique<std::vector<std::byte>>(BlockBytes(key, kBlock));
    ASSERT_TRUE(impl.TEST_RunOnLoop([n] { FailAllocationAfterOnThisThread(n); }).ok());
    ItemResults put(1);
    client->Put(0, kNs, {memd::PutOp{key, *payload, std::nullopt}}, put.Done());
    ASSERT_TRUE(put.WaitFor(std::chrono::seconds(10))) << "allocation " << n << ": no answer";
    ASSERT_TRUE(impl.TEST_RunOnLoop([&injected] { injected = DisarmAllocationFailures(); }).ok());
    const bool stored = put.status(0).ok();
    payload.reset();  // the caller's buffer goes with the answer
    // The next request is served at once (on this connection, or on a new
    // one once the dropped one is replaced), well inside the 3 s op timeout
    // a wedged connection would cost, and the block is either stored whole
    // or not found, never other bytes.
    std::vector<std::byte> back(kBlock);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
    Status answer = Status::Unavailable("not asked");
    while (answer.code() == StatusCode::kUnavailable && std::chrono::steady_clock::now() < until) {
      ItemResults got(1);
      client->Get(0, kNs, {back}, {key}, got.Done());
      ASSERT_TRUE(got.WaitFor(std::chrono::seconds(10))) << "allocation " << n;
      answer = got.status(0);
      if (answer.code() == StatusCode::kUnavailable) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    ASSERT_TRUE(answer.ok() || answer.code() == StatusCode::kNotFound)
        << "allocation " << n << ": " << answer.ToString();
    if (answer.ok()) {
      EXPECT_EQ(back, BlockBytes(key, kBlock)) << "allocation " << n;
    } else {
      EXPECT_FALSE(stored) << "allocation " << n;
    }
  }
  EXPECT_GT(n, 5);
  client->Shutdown();
  server->Stop();
}

}  // namespace
}  // namespace kvtier::testing
