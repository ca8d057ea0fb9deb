// The Redis tier when servers fail: killed during a batch, restarted, frozen,
// out of memory, or refusing large values. Each test owns its server.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "tests/redis/redis_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr NamespaceId kNs{0x77};
constexpr uint64_t kBlock = 1 << 20;
// The mid-flight tests move batches of 16 blocks of 4 MiB: 64 MiB, far more
// than the loopback socket buffers hold, so a request or a reply is still
// on its way for tens of milliseconds, long enough to freeze the server in
// the middle of it.
constexpr uint64_t kBigBlock = 4 << 20;
constexpr size_t kBigBatch = 16;

// Polls `reached` without sleeping (the window it waits for is short) until
// it holds (true) or `limit` passes (false).
bool SpinUntil(const std::function<bool()>& reached, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!reached()) {
    if (Clock::now() > deadline) return false;
  }
  return true;
}

// Runs `op` until it succeeds or 5 s have passed (a tier reconnects by
// itself once its backoff, at most 1 s, has passed); its last status.
Status RetryUntilOk(const std::function<Status()>& op) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  Status st;
  do {
    st = op();
    if (!st.ok()) std::this_thread::sleep_for(milliseconds(50));
  } while (!st.ok() && Clock::now() < deadline);
  return st;
}

class RedisFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  }
  void StartServer(RedisServerOptions so = {}) {
    auto s = RedisServer::Start(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    options_ = RedisTierOptionsFor({server_->endpoint()}, 256 * kBlock);
    options_.redis.op_timeout_ms = 500;
    options_.redis.connect_timeout_ms = 500;
  }
  std::unique_ptr<Tier> Open(uint64_t block = kBlock) {
    auto t = MakeRedisTier(options_, block);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  struct Batch {
    std::vector<std::vector<std::byte>> data;
    std::vector<WriteOp> ops;
  };
  static Batch MakeBatch(uint64_t first, size_t n, uint64_t bytes = kBlock) {
    Batch b;
    for (size_t i = 0; i < n; ++i) b.data.push_back(BlockBytes(TestKey(first + i), bytes));
    for (size_t i = 0; i < n; ++i) b.ops.push_back({TestKey(first + i), b.data[i]});
    return b;
  }

  std::unique_ptr<RedisServer> server_;
  TierOptions options_;
};

TEST_F(RedisFaultTest, KilledDuringABatchFailsUnavailableThenReconnects) {
  StartServer();
  auto tier = Open();
  ASSERT_TRUE(tier);
  Batch warm = MakeBatch(0, 2);
  ASSERT_TRUE(tier->Write(kNs, warm.ops).Wait().ok());
  // Frozen, the server reads nothing: the batch is stuck in flight when the
  // server dies, and every op must fail.
  server_->Pause();
  Batch b = MakeBatch(100, 32);
  const auto start = Clock::now();
  Completion c = tier->Write(kNs, b.ops);
  EXPECT_FALSE(c.Poll());
  server_->Kill();
  ASSERT_TRUE(c.WaitFor(Scaled(std::chrono::seconds(3))).code() != StatusCode::kDeadlineExceeded);
  EXPECT_LT(Clock::now() - start, Scaled(milliseconds(options_.redis.op_timeout_ms + 1000)));
  for (size_t i = 0; i < b.ops.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kUnavailable) << i << ": " << c.result(i).ToString();
  }
  EXPECT_EQ(tier->Usage().blocks, 2u) << "failed writes release their capacity";

  ASSERT_TRUE(server_->Restart().ok());
  const Status st = RetryUntilOk([&] { return tier->Write(kNs, b.ops).Wait(); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<std::byte> out(kBlock);
  ReadOp rd{b.ops[5].key, out};
  ASSERT_TRUE(tier->Read(kNs, std::span(&rd, 1)).Wait().ok());
  EXPECT_EQ(out, b.data[5]);
  tier->Shutdown();
}

// Keys the server lost (flushed here, as after a restart without
// persistence or a TTL expiry) stop counting once a read finds them gone:
// the runtime then forgets the key and never removes it from the tier.
TEST_F(RedisFaultTest, KeysTheServerLostFreeTheirRoomWhenFoundMissing) {
  StartServer();
  options_.capacity_bytes = 4 * kBlock;
  auto tier = Open();
  ASSERT_TRUE(tier);
  Batch b = MakeBatch(0, 4);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  ASSERT_EQ(tier->Usage().blocks, 4u);
  ASSERT_TRUE(server_->Command({"FLUSHALL"}).ok());
  Batch one = MakeBatch(10, 1);
  EXPECT_EQ(tier->Write(kNs, one.ops).Wait().code(), StatusCode::kResourceExhausted);

  std::vector<std::vector<std::byte>> out(4, std::vector<std::byte>(kBlock));
  std::vector<ReadOp> reads;
  for (size_t i = 0; i < 4; ++i) reads.push_back({b.ops[i].key, out[i]});
  Completion c = tier->Read(kNs, reads);
  (void)c.Wait();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.result(i).code(), StatusCode::kNotFound) << i;
  EXPECT_EQ(tier->Usage().blocks, 0u);
  EXPECT_EQ(tier->Usage().used_bytes, 0u);
  Batch next = MakeBatch(20, 4);
  EXPECT_TRUE(tier->Write(kNs, next.ops).Wait().ok());
  tier->Shutdown();
}

// The runtime forgets a block it removed whether or not the DEL worked, so
// a failed DEL must not keep the block's room taken: else once such leaks
// fill the capacity every write fails until a restart.
TEST_F(RedisFaultTest, FailedRemovesFreeTheirRoom) {
  StartServer();
  options_.capacity_bytes = 4 * kBlock;
  auto tier = Open();
  ASSERT_TRUE(tier);
  Batch b = MakeBatch(0, 4);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  server_->Kill();
  std::vector<BlockKey> keys;
  for (const WriteOp& op : b.ops) keys.push_back(op.key);
  Completion removed = tier->Remove(kNs, keys);
  ASSERT_NE(removed.WaitFor(std::chrono::seconds(3)).code(), StatusCode::kDeadlineExceeded);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(removed.result(i).code(), StatusCode::kUnavailable) << removed.result(i).ToString();
  }
  EXPECT_EQ(tier->Usage().blocks, 0u);
  EXPECT_EQ(tier->Usage().used_bytes, 0u);

  ASSERT_TRUE(server_->Restart().ok());
  Batch next = MakeBatch(10, 4);
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  Status st;
  do {
    st = tier->Write(kNs, next.ops).Wait();  // Unavailable until the tier reconnects
    if (st.code() == StatusCode::kUnavailable) std::this_thread::sleep_for(milliseconds(50));
  } while (st.code() == StatusCode::kUnavailable && Clock::now() < deadline);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(tier->Usage().blocks, 4u);
  tier->Shutdown();
}

TEST_F(RedisFaultTest, FrozenServerTimesOutWithinTheDeadline) {
  StartServer();
  options_.redis.op_timeout_ms = 300;
  auto tier = Open();
  ASSERT_TRUE(tier);
  Batch b = MakeBatch(0, 4);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  server_->Pause();
  std::vector<std::vector<std::byte>> out(4, std::vector<std::byte>(kBlock));
  std::vector<ReadOp> reads;
  for (size_t i = 0; i < 4; ++i) reads.push_back({b.ops[i].key, out[i]});
  const auto start = Clock::now();
  Completion c = tier->Read(kNs, reads);
  (void)c.WaitFor(Scaled(std::chrono::seconds(5)));
  const auto elapsed = Clock::now() - start;
  ASSERT_TRUE(c.Poll());
  EXPECT_GE(elapsed, milliseconds(250));
  EXPECT_LT(elapsed, Scaled(milliseconds(1500)));
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kUnavailable);
    EXPECT_NE(c.result(i).message().find("timed out"), std::string_view::npos)
        << c.result(i).ToString();
  }
  server_->Resume();
  const Status st = RetryUntilOk([&] { return tier->Read(kNs, reads).Wait(); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[3], b.data[3]);
  tier->Shutdown();
}

// The server dies while the replies to a large GET batch stream in: blocks
// read whole before the kill are intact, the one cut off and those after it
// fail, none is handed over with wrong bytes, and the tier reads again once
// the server is back (empty: every block is then a miss).
TEST_F(RedisFaultTest, KilledWhileAGetBatchIsReadFailsTheUnreadBlocks) {
  StartServer();
  options_.capacity_bytes = 2 * kBigBatch * kBigBlock;
  options_.redis.op_timeout_ms = 1000;
  auto tier = Open(kBigBlock);
  ASSERT_TRUE(tier);
  Batch b = MakeBatch(0, kBigBatch, kBigBlock);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  std::vector<std::vector<std::byte>> out(kBigBatch, std::vector<std::byte>(kBigBlock));
  std::vector<ReadOp> reads;
  for (size_t i = 0; i < kBigBatch; ++i) reads.push_back({b.ops[i].key, out[i]});

  const uint64_t total = kBigBatch * kBigBlock;
  // Frozen once a block's worth of replies has gone out, the server is
  // killed with the rest unsent: the kill lands in the middle of a reply.
  // The window is tens of milliseconds: a test thread kept off the CPU for
  // it finds every reply sent, and the batch is read again.
  Completion c;
  uint64_t sent = total;
  for (int attempt = 0; attempt < 5 && sent == total; ++attempt) {
    const uint64_t before = server_->Io().written;
    c = tier->Read(kNs, reads);
    ASSERT_TRUE(SpinUntil([&] { return server_->Io().written - before >= kBigBlock; },
                          Scaled(milliseconds(5000))));
    server_->Pause();
    sent = server_->Io().written - before;
    if (sent < total) break;
    server_->Resume();
    ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
  }
  ASSERT_LT(sent, total) << "every reply was sent before the freeze, five times";
  server_->Kill();
  const auto killed = Clock::now();
  ASSERT_NE(c.WaitFor(Scaled(std::chrono::seconds(5))).code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(Clock::now() - killed, Scaled(milliseconds(options_.redis.op_timeout_ms)));
  size_t ok = 0;
  for (size_t i = 0; i < kBigBatch; ++i) {
    if (c.result(i).ok()) {
      ++ok;
      EXPECT_EQ(c.bytes(i), kBigBlock) << i;
      EXPECT_TRUE(out[i] == b.data[i]) << "block " << i << " was read OK with wrong bytes";
    } else {
      EXPECT_EQ(c.result(i).code(), StatusCode::kUnavailable)
          << i << ": " << c.result(i).ToString();
    }
  }
  EXPECT_LT(ok, kBigBatch) << "no read was cut off (" << sent << " of " << total << " bytes sent)";

  ASSERT_TRUE(server_->Restart().ok());
  // The tier reconnects by itself once its backoff (at most 1 s) has passed;
  // the restarted server has none of the blocks.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  Completion again;
  bool unavailable = true;
  while (unavailable && Clock::now() < deadline) {
    again = tier->Read(kNs, reads);
    (void)again.Wait();
    unavailable = false;
    for (size_t i = 0; i < kBigBatch; ++i) {
      unavailable |= again.result(i).code() == StatusCode::kUnavailable;
    }
    if (unavailable) std::this_thread::sleep_for(milliseconds(50));
  }
  for (size_t i = 0; i < kBigBatch; ++i) {
    EXPECT_EQ(again.result(i).code(), StatusCode::kNotFound)
        << i << ": " << again.result(i).ToString();
  }
  EXPECT_EQ(tier->Usage().blocks, 0u) << "blocks found missing stop counting";
  Batch next = MakeBatch(100, 2, kBigBlock);
  ASSERT_TRUE(tier->Write(kNs, next.ops).Wait().ok());
  ReadOp rd{next.ops[1].key, out[0]};
  ASSERT_TRUE(tier->Read(kNs, std::span(&rd, 1)).Wait().ok());
  EXPECT_TRUE(out[0] == next.data[1]);
  tier->Shutdown();
}

// The server freezes while a large SET batch is on its way to it: the
// write fails once no byte has moved for op_timeout (not after the
// batch's whole byte budget, seconds here), reports stored only what the
// server acknowledged, and the tier writes again once the server resumes.
TEST_F(RedisFaultTest, FrozenWhileASetBatchIsWrittenTimesOutWithinTheDeadline) {
  StartServer();
  options_.capacity_bytes = 2 * kBigBatch * kBigBlock;
  options_.redis.op_timeout_ms = 500;
  auto tier = Open(kBigBlock);
  ASSERT_TRUE(tier);
  // Both connections open (two jobs of four), so no connect is in the window.
  Batch warm = MakeBatch(1000, 8, 4096);
  ASSERT_TRUE(tier->Write(kNs, warm.ops).Wait().ok());

  const uint64_t total = kBigBatch * kBigBlock;
  // The window is tens of milliseconds: a test thread kept off the CPU for
  // it finds the whole batch read, which is then removed and written anew.
  Batch b;
  Completion c;
  uint64_t received = total;
  Clock::time_point frozen;
  for (int attempt = 0; attempt < 5 && received == total; ++attempt) {
    b = MakeBatch(10000 * uint64_t(attempt), kBigBatch, kBigBlock);
    const uint64_t before = server_->Io().read;
    c = tier->Write(kNs, b.ops);
    ASSERT_TRUE(SpinUntil([&] { return server_->Io().read - before >= kBigBlock; },
                          Scaled(milliseconds(5000))));
    server_->Pause();
    frozen = Clock::now();
    received = server_->Io().read - before;
    if (received < total) break;
    server_->Resume();
    ASSERT_TRUE(c.Wait().ok()) << c.status().ToString();
    std::vector<BlockKey> keys;
    for (const WriteOp& op : b.ops) keys.push_back(op.key);
    ASSERT_TRUE(tier->Remove(kNs, keys).Wait().ok());
  }
  ASSERT_LT(received, total) << "the server read the whole batch before the freeze, five times";
  (void)c.WaitFor(Scaled(std::chrono::seconds(5)));
  const auto elapsed = Clock::now() - frozen;
  ASSERT_TRUE(c.Poll());
  // A send that waited a whole timeout anew after each few bytes it moved
  // took two or three timeouts here.
  EXPECT_GE(elapsed, milliseconds(options_.redis.op_timeout_ms - 50));
  EXPECT_LT(elapsed, Scaled(milliseconds(options_.redis.op_timeout_ms + 250)))
      << std::chrono::duration_cast<milliseconds>(elapsed).count() << " ms after the freeze";
  std::vector<size_t> stored;
  for (size_t i = 0; i < kBigBatch; ++i) {
    if (c.result(i).ok()) {
      stored.push_back(i);
      continue;
    }
    EXPECT_EQ(c.result(i).code(), StatusCode::kUnavailable) << i << ": " << c.result(i).ToString();
    EXPECT_NE(c.result(i).message().find("timed out"), std::string_view::npos)
        << c.result(i).ToString();
  }
  EXPECT_LT(stored.size(), kBigBatch);
  EXPECT_EQ(tier->Usage().blocks, warm.ops.size() + stored.size());

  server_->Resume();
  Batch next = MakeBatch(100, 2, kBigBlock);
  const Status st = RetryUntilOk([&] { return tier->Write(kNs, next.ops).Wait(); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  // Whatever was reported stored is on the server, byte for byte.
  std::vector<std::byte> out(kBigBlock);
  for (size_t i : stored) {
    ReadOp rd{b.ops[i].key, out};
    ASSERT_TRUE(tier->Read(kNs, std::span(&rd, 1)).Wait().ok()) << i;
    EXPECT_TRUE(out == b.data[i]) << i;
  }
  ReadOp rd{next.ops[0].key, out};
  ASSERT_TRUE(tier->Read(kNs, std::span(&rd, 1)).Wait().ok());
  EXPECT_TRUE(out == next.data[0]);
  tier->Shutdown();
}

TEST_F(RedisFaultTest, ServerOutOfMemoryIsResourceExhausted) {
  StartServer(
      RedisServerOptions{.extra_args = {"--maxmemory", "8mb", "--maxmemory-policy", "noeviction"}});
  auto tier = Open(256 * 1024);
  ASSERT_TRUE(tier);
  Batch b = MakeBatch(0, 64, 256 * 1024);
  Completion c = tier->Write(kNs, b.ops);
  (void)c.Wait();
  size_t ok = 0, oom = 0;
  for (size_t i = 0; i < b.ops.size(); ++i) {
    if (c.result(i).ok()) ++ok;
    if (c.result(i).code() == StatusCode::kResourceExhausted) {
      ++oom;
      EXPECT_NE(c.result(i).message().find("OOM command not allowed"), std::string_view::npos);
    }
  }
  EXPECT_GT(ok, 0u);
  EXPECT_GT(oom, 0u);
  EXPECT_EQ(ok + oom, b.ops.size());
  EXPECT_EQ(tier->Usage().blocks, ok);
  tier->Shutdown();
}

TEST_F(RedisFaultTest, ValuesPastProtoMaxBulkLenAreRefused) {
  StartServer(RedisServerOptions{.extra_args = {"--proto-max-bulk-len", "1mb"}});
  // A block that cannot fit with its header is refused at open.
  auto too_big = MakeRedisTier(options_, kBlock);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("proto-max-bulk-len of 1048576"),
            std::string_view::npos)
      << too_big.status().ToString();
  auto tier = Open(512 * 1024);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->capabilities().max_block_bytes, kBlock - 64);
  Batch b = MakeBatch(0, 1, kBlock);
  Completion c = tier->Write(kNs, b.ops);
  EXPECT_EQ(c.Wait().code(), StatusCode::kInvalidArgument);
  Batch fits = MakeBatch(1, 1, kBlock - 64);
  EXPECT_TRUE(tier->Write(kNs, fits.ops).Wait().ok());
  tier->Shutdown();
}

// A server that caps what it buffers for a client (client-output-buffer-limit
// normal) closes the connection once the replies it holds pass the hard
// limit: a batch of reads is pipelined within that limit, and a block whose
// reply alone exceeds it is refused at open.
TEST_F(RedisFaultTest, ReadsStayWithinTheServersOutputBufferLimit) {
  StartServer(
      RedisServerOptions{.extra_args = {"--client-output-buffer-limit", "normal 4mb 2mb 60"}});
  auto too_big = MakeRedisTier(options_, 4 << 20);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("client-output-buffer-limit"), std::string_view::npos)
      << too_big.status().ToString();

  auto tier = Open(kBlock);
  ASSERT_TRUE(tier);
  Batch b = MakeBatch(0, 32);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  std::vector<std::vector<std::byte>> out(b.ops.size(), std::vector<std::byte>(kBlock));
  std::vector<ReadOp> reads;
  for (size_t i = 0; i < b.ops.size(); ++i) reads.push_back({b.ops[i].key, out[i]});
  Completion c = tier->Read(kNs, reads);
  EXPECT_TRUE(c.Wait().ok()) << c.Wait().ToString();
  for (size_t i = 0; i < reads.size(); ++i) EXPECT_TRUE(out[i] == b.data[i]) << i;
  tier->Shutdown();
}

TEST_F(RedisFaultTest, NoServerAtOpenIsUnavailable) {
  StartServer();
  const std::string endpoint = server_->endpoint();
  server_->Kill();
  auto t = MakeRedisTier(options_, kBlock);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("connect to redis " + endpoint), std::string_view::npos)
      << t.status().ToString();
}

// One key twice in a batch, both SETs failing: the key is un-counted once
// the second ends (neither stored it), whichever of them reserved it.
TEST_F(RedisFaultTest, RepeatedKeyInAFailedBatchIsNotCounted) {
  StartServer();
  auto tier = Open();
  ASSERT_TRUE(tier);
  server_->Kill();
  std::vector<std::byte> data = BlockBytes(TestKey(7), kBlock);
  std::vector<WriteOp> ops = {{TestKey(7), data}, {TestKey(7), data}};
  Completion c = tier->Write(kNs, ops);
  ASSERT_NE(c.WaitFor(Scaled(std::chrono::seconds(3))).code(), StatusCode::kDeadlineExceeded);
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(c.result(i).code(), StatusCode::kUnavailable) << i << ": " << c.result(i).ToString();
  }
  EXPECT_EQ(tier->Usage().blocks, 0u);
  EXPECT_EQ(tier->Usage().used_bytes, 0u);
  tier->Shutdown();
}

}  // namespace
}  // namespace kvtier::testing
