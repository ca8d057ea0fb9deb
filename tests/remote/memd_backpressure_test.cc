// kvtier-memd against a client that sends GETs and never reads the replies:
// the server stops reading that connection while its replies are backlogged,
// so what it queues (and the slots it pins for them) stays bounded, every
// other connection keeps being served, and the connection is closed when its
// replies stay unread past reply_timeout_ms. And a server out of descriptors
// backs off between accepts instead of spinning.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "tests/remote/memd_guard_fixture.h"
#include "tests/remote/raw_memd_client.h"
#include "tests/remote/scripted_memd.h"
#include "tests/support/recording_log.h"
#include "tiers/remote/memd_server_impl.h"
#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::testing {
namespace {

// Sends `frame` on `c` again and again without ever reading, until the
// socket takes no more for a while or `max_frames` went out; returns how
// many went whole.
size_t Flood(RawClient& c, const std::vector<std::byte>& frame, size_t max_frames) {
  const int fd = c.fd();
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  size_t sent = 0, partial = 0;
  int refusals = 0;
  while (sent < max_frames && refusals < 10) {
    ssize_t n = send(fd, frame.data() + partial, frame.size() - partial, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) break;
      ++refusals;  // full; the server may still be reading
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    refusals = 0;
    partial += static_cast<size_t>(n);
    if (partial == frame.size()) {
      partial = 0;
      ++sent;
    }
  }
  return sent;
}

size_t FloodWithGets(RawClient& c, const std::vector<BlockKey>& keys, size_t max_frames) {
  return Flood(
      c,
      memd::Frame(memd::Opcode::kGet, 9, memd::EncodeBody(memd::KeyBatch{NamespaceId{11}, keys})),
      max_frames);
}

TEST_F(MemdGuardTest, UnreadRepliesStopTheServerReadingThatConnection) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(i));
    keys.push_back(TestKey(i));
  }
  auto flood = std::make_unique<RawClient>(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(*flood, kSecret));
  // Up to 20,000 GETs of 8 hits each: 160,000 blocks of replies if all were
  // read. The server takes requests until about 64 MiB (2,048 blocks) wait.
  EXPECT_GT(FloodWithGets(*flood, keys, 20000), 0u);
  // One request past the bound may be queued, never more.
  const size_t bound = 2 * memd::kMaxBatchItems;
  size_t most = 0;
  for (int i = 0; i < 10; ++i) {
    most = std::max(most, server_->TEST_QueuedReplies());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(most, 0u);
  EXPECT_LE(most, bound);
  // Another connection is served meanwhile, blocks intact.
  ASSERT_NO_FATAL_FAILURE(Put(8));
  ASSERT_NO_FATAL_FAILURE(ExpectStored(8));
  ASSERT_NO_FATAL_FAILURE(ExpectStored(0));
  // Hanging up drops the backlog and its pins.
  flood.reset();
  EXPECT_TRUE(Eventually([&] { return server_->TEST_QueuedReplies() == 0; }))
      << server_->TEST_QueuedReplies();
}

// Replies with bodies (STATS: one entry per namespace) are the server's own
// memory, not the pool's: a connection that asks and never reads stops
// being read once about kMaxQueuedHeapBytes of them wait, well before the
// 4,096 frames or 64 MiB that bound replies of slot data.
TEST_F(MemdGuardTest, UnreadStatsRepliesAreBoundedByTheirBytes) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) {
    o.pool.pool_bytes = 128 * o.pool.slot_bytes;  // a block in each of 128 namespaces
  }));
  ASSERT_NO_FATAL_FAILURE(OpenTier(128));
  std::vector<std::byte> data = BlockBytes(TestKey(0), kBlock);
  for (uint64_t ns = 1; ns <= 128; ++ns) {
    WriteOp w{TestKey(0), data};
    Completion c = tier_->Write(NamespaceId{ns}, std::span(&w, 1));
    ASSERT_TRUE(c.WaitFor(kWait).ok()) << c.status().ToString();
  }
  auto flood = std::make_unique<RawClient>(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(*flood, kSecret));
  EXPECT_GT(Flood(*flood, memd::Frame(memd::Opcode::kStats, 9, {}), 20000), 0u);
  const uint64_t reply = memd::EncodeBody(server_->GetStats()).size();
  ASSERT_GT(reply * memd::kMaxQueuedReplies, 4 * memd::kMaxQueuedHeapBytes) << "replies too small";
  // A slow server (a sanitizer build) first fills the socket's own buffers.
  ASSERT_TRUE(Eventually([&] { return server_->TEST_QueuedReplies() > 0; }));
  uint64_t most = 0;
  size_t frames = 0;
  for (int i = 0; i < 10; ++i) {
    most = std::max(most, server_->TEST_QueuedReplyHeapBytes());
    frames = std::max(frames, server_->TEST_QueuedReplies());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(frames, 0u);
  EXPECT_LE(most, memd::kMaxQueuedHeapBytes + 2 * (reply + memd::kFrameHeaderBytes));
  flood.reset();
  EXPECT_TRUE(Eventually([&] { return server_->TEST_QueuedReplyHeapBytes() == 0; }));
}

// A client that stops reading is closed once its replies make no write
// progress for reply_timeout_ms, which returns its connection and the pins
// its GET replies held.
TEST_F(MemdGuardTest, RepliesNobodyReadsCloseTheConnection) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer([](memd::MemdServerOptions& o) { o.reply_timeout_ms = 300; }));
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(i));
    keys.push_back(TestKey(i));
  }
  RawClient flood(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(flood, kSecret));
  EXPECT_EQ(server_->TEST_Connections(), 2u);
  EXPECT_GT(FloodWithGets(flood, keys, 20000), 0u);
  // The flood connection still open on this side, the server let it go.
  EXPECT_TRUE(Eventually([&] {
    return server_->TEST_QueuedReplies() == 0 && server_->TEST_Connections() == 1;
  })) << server_->TEST_QueuedReplies()
      << " replies queued, " << server_->TEST_Connections() << " connections";
  // No pin is left: removed blocks free their slots at once (a pinned one
  // would hold its slot until unpinned).
  Completion removed = tier_->Remove(kNs, keys);
  ASSERT_TRUE(removed.WaitFor(kWait).ok()) << removed.status().ToString();
  EXPECT_EQ(server_->GetStats().used_slots, 0u);
}

// A put whose data waits unread because the server stopped reading the
// connection (its GET replies backlogged) has not stalled: it is not cut off
// at put_timeout_ms while the peer takes its time reading the replies (which
// reply_timeout_ms bounds), and it commits once the server reads again.
TEST_F(MemdGuardTest, APutTheServerStoppedReadingIsNotCutOff) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) {
    o.put_timeout_ms = 300;
    o.reply_timeout_ms = 30000;
  }));
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(i));
    keys.push_back(TestKey(i));
  }
  RawClient c(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));
  const BlockKey key = TestKey(50);
  constexpr uint64_t kItem = 1000;
  const std::vector<std::byte> body = EncodeStoredBlock(kNs, key, BlockBytes(key, kItem));
  c.Send(memd::Frame(memd::Opcode::kPutBegin, 2,
                     memd::EncodeBody(memd::PutBegin{kNs, {{key, kItem}}})));
  auto begun = c.ReadFrame();
  ASSERT_TRUE(begun.has_value() && begun->first.opcode == memd::Opcode::kBeginReply);
  // 600 GETs of 8 blocks: about 150 MiB of replies, far past what the
  // server queues (64 MiB) and the sockets hold. Then the put's data.
  const std::vector<std::byte> get =
      memd::Frame(memd::Opcode::kGet, 9, memd::EncodeBody(memd::KeyBatch{kNs, keys}));
  for (int i = 0; i < 600; ++i) c.Send(get);
  c.Send(memd::Frame(memd::Opcode::kPutData, 2, body, 0));
  c.Send(memd::Frame(memd::Opcode::kPutCommit, 2, {}));
  ASSERT_TRUE(Eventually([&] { return server_->TEST_QueuedReplies() > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // past put_timeout_ms
  for (;;) {
    auto f = c.ReadFrame();
    ASSERT_TRUE(f.has_value()) << "the connection was closed";
    if (f->first.opcode == memd::Opcode::kError) {
      auto e = memd::DecodeError(f->second);
      FAIL() << "ERROR: " << (e.ok() ? e->text : e.status().ToString());
    }
    if (f->first.opcode != memd::Opcode::kStatusReply || f->first.request_id != 2) continue;
    auto codes = memd::DecodeStatusList(f->second);
    ASSERT_TRUE(codes.ok()) << codes.status().ToString();
    EXPECT_EQ(codes->codes, std::vector<StatusCode>{StatusCode::kOk});
    break;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectStored(0));
}

// The GET replies of one connection pin at most three quarters of the
// pool's slots until they are sent: one GET naming every stored block of a
// full 16-slot pool gets 12 of them, and ResourceExhausted for the rest,
// which a later GET gets. A connection that took its replies slowly used to
// pin every slot, and no other client could store anything meanwhile.
TEST_F(MemdGuardTest, OneConnectionsRepliesPinAtMostThreeQuartersOfThePool) {
  ASSERT_NO_FATAL_FAILURE(StartServer([](memd::MemdServerOptions& o) {
    o.pool.high_watermark = 1.0;  // a full pool evicts nothing
  }));
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(i));
    keys.push_back(TestKey(i));
  }
  ASSERT_EQ(server_->GetStats().used_slots, 16u);
  RawClient c(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));
  auto get = [&](const std::vector<BlockKey>& names, std::vector<BlockKey>* refused) -> size_t {
    c.Send(memd::Frame(memd::Opcode::kGet, 9, memd::EncodeBody(memd::KeyBatch{kNs, names})));
    size_t data = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      auto f = c.ReadFrame();
      if (!f) {
        ADD_FAILURE() << "the connection was closed";
        break;
      }
      if (f->first.opcode == memd::Opcode::kGetData) {
        ++data;
        const BlockKey& key = names.at(f->first.item);
        EXPECT_EQ(f->second, EncodeStoredBlock(kNs, key, BlockBytes(key, kBlock)));
        continue;
      }
      EXPECT_EQ(f->first.opcode, memd::Opcode::kGetStatus);
      EXPECT_EQ(memd::DecodeCode(static_cast<uint8_t>(f->second.at(0))),
                StatusCode::kResourceExhausted);
      refused->push_back(names.at(f->first.item));
    }
    return data;
  };
  std::vector<BlockKey> refused, again;
  EXPECT_EQ(get(keys, &refused), 12u);
  ASSERT_EQ(refused.size(), 4u);
  EXPECT_EQ(get(refused, &again), 4u) << "the pins ended once the replies were sent";
  EXPECT_TRUE(again.empty());
}

// A peer that keeps its replies backlogged while taking them steadily makes
// the server stop and resume reading it over and over: a put whose data
// never comes is still cancelled once put_timeout_ms of its own time and at
// most reply_timeout_ms of pauses have passed. Each resume used to restart
// every open put's clock, so the put held its slots for as long as the
// peer kept asking.
TEST_F(MemdGuardTest, RepliesKeptBackloggedDoNotHoldAStalledPutForEver) {
  auto log = std::make_shared<RecordingLog>(
      LogLevel::kWarning, "a put made no progress for 300 ms; its reservations are cancelled");
  ASSERT_NO_FATAL_FAILURE(StartServer([&](memd::MemdServerOptions& o) {
    o.log = log;
    o.put_timeout_ms = 300;
    o.reply_timeout_ms = 600;
  }));
  RawClient c(server_->port());
  ASSERT_NO_FATAL_FAILURE(Authenticate(c, kSecret));
  const BlockKey key = TestKey(50);
  c.Send(memd::Frame(memd::Opcode::kPutBegin, 2,
                     memd::EncodeBody(memd::PutBegin{kNs, {{key, 1000}}})));
  auto begun = c.ReadFrame();
  ASSERT_TRUE(begun.has_value() && begun->first.opcode == memd::Opcode::kBeginReply);
  ASSERT_EQ(server_->GetStats().used_slots, 1u);
  // Each GET names as many unknown keys as replies may wait, so the server
  // stops reading after every one until the peer has taken some.
  std::vector<BlockKey> misses;
  for (uint64_t i = 0; i < memd::kMaxBatchItems; ++i) misses.push_back(TestKey(100000 + i));
  const std::vector<std::byte> get =
      memd::Frame(memd::Opcode::kGet, 9, memd::EncodeBody(memd::KeyBatch{kNs, misses}));
  std::thread sender([&] {
    for (;;) {
      for (size_t at = 0; at < get.size();) {
        const ssize_t n = send(c.fd(), get.data() + at, get.size() - at, MSG_NOSIGNAL);
        if (n <= 0) return;  // closed, by the server or below
        at += static_cast<size_t>(n);
      }
    }
  });
  // Replies taken as fast as they come, until the server hangs up (its
  // ERROR frame may be lost to the reset: the GETs it no longer reads).
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(5) && c.ReadFrame()) {
  }
  const auto took = std::chrono::steady_clock::now() - start;
  shutdown(c.fd(), SHUT_RDWR);
  sender.join();
  EXPECT_LT(took, std::chrono::seconds(5)) << "the connection was still served";
  EXPECT_EQ(log->lines().size(), 1u) << "the put was not cancelled";
  EXPECT_TRUE(Eventually([&] { return server_->GetStats().used_slots == 0; }))
      << server_->GetStats().used_slots;
}

// CPU time this process has used, user and system.
std::chrono::microseconds CpuTime() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return std::chrono::seconds(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         std::chrono::microseconds(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Out of descriptors, the server cannot accept a waiting connection: it says
// so (once, not once per try), waits between tries instead of spinning, and
// takes the connection once descriptors are back.
TEST_F(MemdGuardTest, AcceptOutOfDescriptorsBacksOffAndRecovers) {
#if defined(__SANITIZE_ADDRESS__)
  // The ASan/UBSan runtime needs descriptors of its own (UBSan probes memory
  // through a pipe and then reports a false invalid vptr); the normal and
  // TSan builds run this test.
  GTEST_SKIP() << "an ASan/UBSan build cannot run out of descriptors safely";
#endif
  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "accept");
  ASSERT_NO_FATAL_FAILURE(StartServer([&](memd::MemdServerOptions& o) { o.log = log; }));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  {
    // The lowest free descriptor: every one below is taken, so with the
    // limit there no descriptor can be opened.
    const int lowest = dup(fd);
    ASSERT_GE(lowest, 0);
    close(lowest);
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(lowest);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    struct Restore {
      rlimit r;
      ~Restore() { setrlimit(RLIMIT_NOFILE, &r); }
    } restore{saved};
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const auto cpu = CpuTime();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    // About four tries; a loop retrying at once would burn the whole time.
    EXPECT_LT(CpuTime() - cpu, std::chrono::milliseconds(100));
    EXPECT_EQ(server_->TEST_Connections(), 0u);
  }
  const std::vector<std::string> lines = log->lines();
  ASSERT_EQ(lines.size(), 1u) << "one warning a second at most";
  EXPECT_NE(lines[0].find("retrying every 100 ms"), std::string::npos) << lines[0];
  EXPECT_TRUE(Eventually([&] { return server_->TEST_Connections() == 1; }));
  close(fd);
}

}  // namespace
}  // namespace kvtier::testing
