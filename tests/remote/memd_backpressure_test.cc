// kvtier-memd against a client that sends GETs and never reads the replies:
// the server stops reading that connection while its replies are backlogged,
// so what it queues (and the slots it pins for them) stays bounded, and
// every other connection keeps being served.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "tests/remote/memd_guard_fixture.h"
#include "tests/remote/raw_memd_client.h"
#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::testing {
namespace {

// Sends GETs of `keys` on `c` without ever reading, until the socket takes
// no more for a while or `max_frames` went out; returns how many went whole.
size_t FloodWithGets(RawClient& c, const std::vector<BlockKey>& keys, size_t max_frames) {
  const int fd = c.fd();
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const auto frame =
      memd::Frame(memd::Opcode::kGet, 9, memd::EncodeBody(memd::KeyBatch{NamespaceId{11}, keys}));
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

}  // namespace
}  // namespace kvtier::testing
