// For tests of a tier whose server stops answering (SIGSTOP: its sockets stay
// open, so connects succeed and requests hang): the tier may hold one read
// per connection to its timeout, then must fail reads at once while it
// reconnects, and serve again once the server answers.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/tier.h"
#include "tests/support/time_scale.h"

namespace kvtier::testing {

// Writes `data` as `key` and reads it back once per connection, so that
// every connection is up before the server goes silent.
inline void WriteAndReadOnEachConnection(Tier& tier, NamespaceId ns, const BlockKey& key,
                                         const std::vector<std::byte>& data, ReadOp op,
                                         int connections) {
  WriteOp w{key, data};
  ASSERT_TRUE(tier.Write(ns, std::span(&w, 1)).Wait().ok());
  for (int i = 0; i < connections; ++i) {
    ASSERT_TRUE(tier.Read(ns, std::span(&op, 1)).Wait().ok());
  }
}

// With the tier's server silent, reads `op` every 10 ms for 8 timeouts
// (several reconnect cycles of a connect timeout and a backoff each). Every
// read must fail, at most `connections` of them taking a third of a timeout
// or more, the last one Unavailable with `says` in its message.
inline void ExpectFastFailuresWhileSilent(Tier& tier, NamespaceId ns, ReadOp op,
                                          uint32_t timeout_ms, int connections,
                                          const std::string& says) {
  using Clock = std::chrono::steady_clock;
  const auto window = std::chrono::milliseconds(timeout_ms * 8);
  const auto slow = std::chrono::milliseconds(timeout_ms / 3);
  const auto limit = std::chrono::milliseconds(timeout_ms * 3);
  int reads = 0, slow_reads = 0;
  Status last;
  const auto start = Clock::now();
  while (Clock::now() - start < window) {
    const auto t0 = Clock::now();
    Completion c = tier.Read(ns, std::span(&op, 1));
    ASSERT_TRUE(c.WaitFor(limit).ok() || c.Poll()) << "a read outlived " << limit.count() << " ms";
    last = c.result(0);
    ASSERT_FALSE(last.ok()) << "a silent server served a read";
    ++reads;
    slow_reads += Clock::now() - t0 >= slow ? 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LE(slow_reads, connections) << "of " << reads << " reads";
  EXPECT_GE(reads - slow_reads, 20);
  EXPECT_EQ(last.code(), StatusCode::kUnavailable) << last.ToString();
  EXPECT_NE(last.message().find(says), std::string::npos) << last.ToString();
}

// Once the server answers again, a read of `op` succeeds within 5 s (the
// tier's reconnect backoff) and returns `want`.
inline void ExpectServesAgain(Tier& tier, NamespaceId ns, ReadOp op,
                              const std::vector<std::byte>& want) {
  const auto until = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(5));
  Status st;
  do {
    std::fill(op.dst.begin(), op.dst.end(), std::byte{0});
    st = tier.Read(ns, std::span(&op, 1)).Wait();
    if (!st.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (!st.ok() && std::chrono::steady_clock::now() < until);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(std::equal(op.dst.begin(), op.dst.end(), want.begin(), want.end()));
}

}  // namespace kvtier::testing
