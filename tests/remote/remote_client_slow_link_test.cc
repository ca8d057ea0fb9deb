// The remote client on a connection that keeps moving bytes, but takes
// longer than op_timeout_ms for a request (large blocks on a slow network,
// many queued ahead): the request is answered rather than failed with every
// other request on the connection. A server that stops moving bytes is
// still given up op_timeout_ms after its last byte, long before the cap a
// request's bytes allow.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/remote/scripted_memd.h"
#include "tests/support/block_data.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

using memd::Opcode;
using Clock = std::chrono::steady_clock;

constexpr NamespaceId kNs{22};
constexpr char kSecret[] = "slow-link-secret";
// Four blocks of 4 MiB: a cap of op_timeout_ms plus 4 s at 4 MiB/s.
constexpr size_t kItems = 4;
constexpr size_t kPayloadBytes = 4 << 20;
constexpr uint64_t kSlotBytes = kPayloadBytes + kBlockHeaderBytes;

std::vector<std::byte> StoredBlock(size_t i) {
  return EncodeStoredBlock(kNs, TestKey(i), BlockBytes(TestKey(i), kPayloadBytes));
}

class RemoteClientSlowLinkTest : public ::testing::Test {
 protected:
  // A server that answers a GET of kItems blocks with the first
  // `sent` of them, `gap` apart, then waits for the client to hang up. The
  // blocks are encoded beforehand, so the gap is the sleep alone, however
  // loaded the machine.
  void Serve(size_t sent, std::chrono::milliseconds gap) {
    std::vector<std::vector<std::byte>> blocks;
    for (size_t i = 0; i < sent; ++i) blocks.push_back(StoredBlock(i));
    server_ = std::make_unique<ScriptedMemd>([sent, gap, blocks](ScriptedConn& c) {
      if (!c.Welcome(kSecret, kSlotBytes)) return;
      auto get = c.ReadFrame();
      if (!get || get->first.opcode != Opcode::kGet) {
        ADD_FAILURE() << "scripted memd: no GET";
        return;
      }
      for (size_t i = 0; i < sent; ++i) {
        if (i > 0) std::this_thread::sleep_for(gap);
        c.Send(memd::Frame(Opcode::kGetData, get->first.request_id, blocks[i],
                           static_cast<uint16_t>(i)));
      }
      c.Drain(1);  // until the client hangs up
    });
    auto c = memd::RemoteClient::Create(ScriptedClientOptions(*server_, kSecret, timeout_ms_),
                                        StderrLogSink(LogLevel::kError), nullptr);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    server_.reset();
  }
  ItemResults Get() {
    dsts_.assign(kItems, std::vector<std::byte>(kPayloadBytes));
    std::vector<std::span<std::byte>> dsts;
    std::vector<BlockKey> keys;
    for (size_t i = 0; i < kItems; ++i) {
      dsts.emplace_back(dsts_[i]);
      keys.push_back(TestKey(i));
    }
    ItemResults a(kItems);
    client_->Get(0, kNs, std::move(dsts), std::move(keys), a.Done());
    return a;
  }

  const uint32_t timeout_ms_ = 300 * static_cast<uint32_t>(TimeScale());
  std::vector<std::vector<std::byte>> dsts_;
  std::unique_ptr<ScriptedMemd> server_;
  std::unique_ptr<memd::RemoteClient> client_;
};

// The blocks come half a timeout apart, so the last is a timeout and a half
// after the GET: each is a hit, byte for byte. The request used to fail at
// its deadline with the blocks still coming.
TEST_F(RemoteClientSlowLinkTest, ARequestWhoseBytesKeepComingOutlastsItsDeadline) {
  ASSERT_NO_FATAL_FAILURE(Serve(kItems, std::chrono::milliseconds(timeout_ms_ / 2)));
  ItemResults get = Get();
  ASSERT_TRUE(get.WaitFor(std::chrono::milliseconds(10 * timeout_ms_ + 10000)));
  for (size_t i = 0; i < kItems; ++i) {
    EXPECT_TRUE(get.status(i).ok()) << i << ": " << get.status(i).ToString();
    EXPECT_TRUE(dsts_[i] == BlockBytes(TestKey(i), kPayloadBytes)) << i << ": wrong bytes";
  }
}

// The server sends one block and then nothing: the rest fail
// DeadlineExceeded a timeout after that block, not at the 4 s cap.
TEST_F(RemoteClientSlowLinkTest, AServerThatStopsMovingBytesIsGivenUpATimeoutAfterItsLast) {
  ASSERT_NO_FATAL_FAILURE(Serve(1, std::chrono::milliseconds(0)));
  const Clock::time_point start = Clock::now();
  ItemResults get = Get();
  ASSERT_TRUE(get.WaitFor(std::chrono::milliseconds(10 * timeout_ms_ + 10000)));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(get.finished() - start);
  EXPECT_TRUE(get.status(0).ok()) << get.status(0).ToString();
  for (size_t i = 1; i < kItems; ++i) {
    EXPECT_EQ(get.status(i).code(), StatusCode::kDeadlineExceeded) << get.status(i).ToString();
  }
  EXPECT_GE(took.count(), timeout_ms_);
  EXPECT_LT(took.count(), timeout_ms_ + 3000) << "waited for the cap, not for the stall";
}

}  // namespace
}  // namespace kvtier::testing
