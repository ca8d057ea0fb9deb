// The io_uring engine against real files and pipes: round trips, short
// reads, errno conversion, deadlines and the bounded queue.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "io/io_engine.h"

namespace kvtier::internal {
namespace {

struct Scratch {
  Scratch() {
    std::string p = std::string(KVTIER_BINARY_DIR) + "/uring-test-XXXXXX";
    fd = mkstemp(p.data());
    path = p;
  }
  ~Scratch() {
    close(fd);
    unlink(path.c_str());
  }
  int fd = -1;
  std::string path;
};

std::unique_ptr<IoEngine> MakeEngine(UringEngineOptions o = {}) {
  auto e = NewUringEngine(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// Submits one request and waits for its completion record.
IoCompletion RunOne(IoEngine& e, IoOp op, int fd, uint64_t offset, std::vector<iovec> iov,
                 uint64_t id = 7) {
  std::promise<IoCompletion> p;
  std::vector<IoRequest> reqs(1);
  reqs[0] = IoRequest{op, fd, offset, std::move(iov), id,
                      [&p](const IoCompletion& c) { p.set_value(c); }};
  Status st = e.Submit(std::move(reqs));
  if (!st.ok()) return IoCompletion{0, st, 0};
  auto f = p.get_future();
  EXPECT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "hung";
  return f.get();
}

TEST(UringEngine, WritesAndReadsBackWithTheRequestId) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  Scratch f;
  std::vector<char> a(10000, 'a'), b(5000, 'b'), back(15000);
  IoCompletion w = RunOne(*e, IoOp::kWrite, f.fd, 4096, {{a.data(), a.size()}, {b.data(), b.size()}}, 42);
  EXPECT_TRUE(w.status.ok()) << w.status.ToString();
  EXPECT_EQ(w.id, 42u);
  EXPECT_EQ(w.bytes, 15000u);
  IoCompletion s = RunOne(*e, IoOp::kFsync, f.fd, 0, {});
  EXPECT_TRUE(s.status.ok()) << s.status.ToString();
  IoCompletion r = RunOne(*e, IoOp::kRead, f.fd, 4096, {{back.data(), back.size()}});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.bytes, 15000u);
  EXPECT_EQ(std::memcmp(back.data(), a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(back.data() + a.size(), b.data(), b.size()), 0);
  e->Shutdown();
}

TEST(UringEngine, ReadPastEndOfFileIsAShortReadError) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  Scratch f;
  std::vector<char> data(6000, 'x'), back(8192);
  ASSERT_EQ(pwrite(f.fd, data.data(), data.size(), 0), 6000);
  IoCompletion r = RunOne(*e, IoOp::kRead, f.fd, 0, {{back.data(), back.size()}});
  EXPECT_EQ(r.status.ToString(),
            "io_error: io_uring read at offset 6000: short read: 6000 of 8192 bytes");
  EXPECT_EQ(r.bytes, 6000u);
}

TEST(UringEngine, ShortPipeReadsAreResubmittedForTheRest) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  std::vector<char> back(8192);
  std::promise<IoCompletion> done;
  std::vector<IoRequest> reqs(1);
  reqs[0] = IoRequest{IoOp::kRead, p[0], static_cast<uint64_t>(-1), {{back.data(), back.size()}},
                      1, [&](const IoCompletion& c) { done.set_value(c); }};
  ASSERT_TRUE(e->Submit(std::move(reqs)).ok());
  // Two halves: a pipe read returns what is there, so the engine must come
  // back for the second half (or get all of it at once if it was late).
  std::string half1(4096, '1'), half2(4096, '2');
  ASSERT_EQ(write(p[1], half1.data(), half1.size()), 4096);
  ASSERT_EQ(write(p[1], half2.data(), half2.size()), 4096);
  IoCompletion c = done.get_future().get();
  ASSERT_TRUE(c.status.ok()) << c.status.ToString();
  EXPECT_EQ(c.bytes, 8192u);
  EXPECT_EQ(std::string(back.data(), 4096), half1);
  EXPECT_EQ(std::string(back.data() + 4096, 4096), half2);
  close(p[0]);
  close(p[1]);
}

TEST(UringEngine, ErrnoBecomesAStatusNamingTheOperation) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  Scratch f;
  int wronly = open(f.path.c_str(), O_WRONLY);
  ASSERT_GE(wronly, 0);
  std::vector<char> back(4096);
  IoCompletion r = RunOne(*e, IoOp::kRead, wronly, 8192, {{back.data(), back.size()}});
  EXPECT_EQ(r.status.ToString(), "io_error: io_uring read at offset 8192: Bad file descriptor");
  close(wronly);
}

TEST(UringEngine, StalledReadEndsAtTheDeadline) {
  auto e = MakeEngine({.timeout_ms = 150});
  ASSERT_TRUE(e);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  std::vector<char> back(4096);
  const auto start = std::chrono::steady_clock::now();
  IoCompletion r = RunOne(*e, IoOp::kRead, p[0], static_cast<uint64_t>(-1), {{back.data(), 4096}});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded) << r.status.ToString();
  EXPECT_NE(r.status.message().find("no completion within 150 ms"), std::string::npos);
  EXPECT_GE(took, std::chrono::milliseconds(140));
  EXPECT_LT(took, std::chrono::seconds(3));
  close(p[0]);
  close(p[1]);
}

TEST(UringEngine, FullQueueIsBusyAndShutdownRefuses) {
  auto e = MakeEngine({.queue_depth = 1, .max_queued = 2});
  ASSERT_TRUE(e);
  Scratch f;
  std::vector<char> buf(4096);
  std::vector<IoRequest> three(3);
  for (auto& r : three) r = IoRequest{IoOp::kWrite, f.fd, 0, {{buf.data(), 4096}}, 0, nullptr};
  Status busy = e->Submit(std::move(three));
  EXPECT_EQ(busy.ToString(), "busy: io engine queue is full (2 requests)");
  e->Shutdown();
  std::vector<IoRequest> one(1);
  one[0] = IoRequest{IoOp::kWrite, f.fd, 0, {{buf.data(), 4096}}, 0, nullptr};
  EXPECT_EQ(e->Submit(std::move(one)).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvtier::internal
