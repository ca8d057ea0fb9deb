// The io_uring engine against real files and pipes: round trips, short
// reads, errno conversion, deadlines and the bounded queue.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "io/io_engine.h"
#include "tests/io/uring_test_util.h"
#include "tests/support/time_scale.h"

namespace kvtier::internal {
namespace {

// Submits one request and waits for its completion record.
IoCompletion RunOne(IoEngine& e, IoOp op, int fd, uint64_t offset, std::vector<iovec> iov,
                    uint64_t id = 7) {
  std::promise<IoCompletion> p;
  std::vector<IoRequest> reqs(1);
  reqs[0] = IoRequest{
      op, fd, offset, std::move(iov), id, [&p](const IoCompletion& c) { p.set_value(c); }};
  Status st = e.Submit(std::move(reqs));
  if (!st.ok()) return IoCompletion{0, st, 0};
  auto f = p.get_future();
  EXPECT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "hung";
  return f.get();
}

TEST(UringEngine, WritesAndReadsBackWithTheRequestId) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  ScratchFile f;
  std::vector<char> a(10000, 'a'), b(5000, 'b'), back(15000);
  IoCompletion w =
      RunOne(*e, IoOp::kWrite, f.fd, 4096, {{a.data(), a.size()}, {b.data(), b.size()}}, 42);
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
  ScratchFile f;
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
  reqs[0] = IoRequest{IoOp::kRead,
                      p[0],
                      static_cast<uint64_t>(-1),
                      {{back.data(), back.size()}},
                      1,
                      [&](const IoCompletion& c) { done.set_value(c); }};
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
  ScratchFile f;
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
  EXPECT_LT(took, kvtier::testing::Scaled(std::chrono::seconds(3)));
  close(p[0]);
  close(p[1]);
}

IoRequest Read(int fd, uint64_t offset, iovec buf, uint64_t id,
               std::function<void(const IoCompletion&)> done) {
  return IoRequest{IoOp::kRead, fd, offset, {buf}, id, std::move(done)};
}

// The deadline counts device time, not time spent queued behind other I/O:
// with one slot, B waits for A to time out and is then issued and served.
TEST(UringEngine, QueuedRequestGetsItsFullDeadlineOnceIssued) {
  auto e = MakeEngine({.queue_depth = 1, .timeout_ms = 100});
  ASSERT_TRUE(e);
  ScratchFile f;
  std::string data(4096, 'q');
  ASSERT_EQ(pwrite(f.fd, data.data(), data.size(), 0), 4096);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  std::vector<char> a(4096), b(4096);
  std::promise<IoCompletion> done_a, done_b;
  std::vector<IoRequest> reqs(2);
  reqs[0] = Read(p[0], static_cast<uint64_t>(-1), {a.data(), 4096}, 1,
                 [&](const IoCompletion& c) { done_a.set_value(c); });
  reqs[1] = Read(f.fd, 0, {b.data(), 4096}, 2, [&](const IoCompletion& c) { done_b.set_value(c); });
  ASSERT_TRUE(e->Submit(std::move(reqs)).ok());
  auto fa = done_a.get_future();
  auto fb = done_b.get_future();
  ASSERT_EQ(fa.wait_for(kvtier::testing::Scaled(std::chrono::seconds(3))),
            std::future_status::ready);
  ASSERT_EQ(fb.wait_for(kvtier::testing::Scaled(std::chrono::seconds(3))),
            std::future_status::ready);
  EXPECT_EQ(fa.get().status.code(), StatusCode::kDeadlineExceeded);
  IoCompletion cb = fb.get();
  ASSERT_TRUE(cb.status.ok()) << cb.status.ToString();
  EXPECT_EQ(cb.bytes, 4096u);
  EXPECT_EQ(std::string(b.data(), b.size()), data);
  e->Shutdown();
  close(p[0]);
  close(p[1]);
}

TEST(UringEngine, FullQueueIsBusyAndShutdownRefuses) {
  auto e = MakeEngine({.queue_depth = 1, .max_queued = 2});
  ASSERT_TRUE(e);
  ScratchFile f;
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

// Page-aligned heap memory for fixed-buffer registration.
struct PageBuffer {
  explicit PageBuffer(size_t n) : bytes(n), p(static_cast<char*>(std::aligned_alloc(4096, n))) {}
  ~PageBuffer() { std::free(p); }
  size_t bytes;
  char* p;
};

TEST(UringEngine, RegisteredBuffersUseFixedOpsAndRoundTrip) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  ScratchFile f;
  PageBuffer mem(64 * 1024), other(4096);
  const iovec range{mem.p, mem.bytes};
  EXPECT_EQ(e->RegisterBuffers(std::span(&range, 1)), 64u * 1024);
  EXPECT_EQ(e->RegisterBuffers(std::span(&range, 1)), 0u) << "registration happens once";
  EXPECT_TRUE(e->IsRegistered(mem.p, mem.bytes));
  EXPECT_TRUE(e->IsRegistered(mem.p + 4096, 4096));
  EXPECT_FALSE(e->IsRegistered(mem.p + 60 * 1024, 8192)) << "runs past the end";
  EXPECT_FALSE(e->IsRegistered(other.p, 4096));
  ASSERT_TRUE(e->RegisterFile(f.fd).ok());
  Status again = e->RegisterFile(f.fd);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(again.message(), "io engine: a fixed file is already registered");

  for (size_t i = 0; i < 32 * 1024; ++i) mem.p[i] = static_cast<char>(i * 13 + 5);
  IoCompletion w = RunOne(*e, IoOp::kWrite, f.fd, 0, {{mem.p, 32 * 1024}});
  ASSERT_TRUE(w.status.ok()) << w.status.ToString();
  EXPECT_EQ(w.bytes, 32u * 1024);
  EXPECT_EQ(e->FixedBufferIos(), 1u);
  std::vector<char> tail(8192, 'z');  // plain memory, two iovecs: a vectored write
  w = RunOne(*e, IoOp::kWrite, f.fd, 32 * 1024, {{tail.data(), 4096}, {tail.data() + 4096, 4096}});
  ASSERT_TRUE(w.status.ok()) << w.status.ToString();
  EXPECT_EQ(e->FixedBufferIos(), 1u);

  IoCompletion r = RunOne(*e, IoOp::kRead, f.fd, 0, {{mem.p + 32 * 1024, 32 * 1024}});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(e->FixedBufferIos(), 2u);
  EXPECT_EQ(std::memcmp(mem.p, mem.p + 32 * 1024, 32 * 1024), 0);
  // What reached the file, read without the engine.
  std::vector<char> disk(40 * 1024);
  ASSERT_EQ(pread(f.fd, disk.data(), disk.size(), 0), static_cast<ssize_t>(disk.size()));
  EXPECT_EQ(std::memcmp(disk.data(), mem.p, 32 * 1024), 0);
  EXPECT_EQ(std::memcmp(disk.data() + 32 * 1024, tail.data(), tail.size()), 0);
}

// The child of the test below: 0 when a prefix was registered and both
// kinds of memory round-trip, else the number of the check that failed. How
// much fits depends on what else the kernel charges to the limit (the ring),
// so the prefix is checked for shape, not size.
int RegisterOverTheLimit(int fd) {
  rlimit lim{64 * 1024, 64 * 1024};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0) return 3;
  if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) return 4;
  auto e = NewUringEngine({});
  if (!e.ok()) return 5;
  PageBuffer mem(256 * 1024);
  const iovec range{mem.p, mem.bytes};
  constexpr size_t kPiece = 16 * 1024;
  const uint64_t n = (*e)->RegisterBuffers(std::span(&range, 1));
  if (n < kPiece || n > 64 * 1024 || n % 4096 != 0) return 6;
  if (!(*e)->IsRegistered(mem.p, n) || (*e)->IsRegistered(mem.p + n, 4096)) return 7;
  char* head = mem.p;               // registered
  char* tail = mem.p + 128 * 1024;  // plain
  auto pattern = [](size_t i) { return static_cast<char>(i * 7 + 1); };
  for (size_t i = 0; i < kPiece; ++i) head[i] = pattern(i);
  for (size_t i = 0; i < kPiece; ++i) tail[i] = static_cast<char>(i * 3 + 2);
  if (!RunOne(**e, IoOp::kWrite, fd, 0, {{head, kPiece}}).status.ok()) return 8;
  if (!RunOne(**e, IoOp::kWrite, fd, kPiece, {{tail, kPiece}}).status.ok()) return 9;
  if ((*e)->FixedBufferIos() != 1) return 10;
  // Crosswise: the plain bytes come back into registered memory and the
  // registered ones into plain memory.
  if (!RunOne(**e, IoOp::kRead, fd, kPiece, {{head, kPiece}}).status.ok()) return 11;
  char* plain_back = mem.p + 192 * 1024;
  if (!RunOne(**e, IoOp::kRead, fd, 0, {{plain_back, kPiece}}).status.ok()) return 12;
  if ((*e)->FixedBufferIos() != 2) return 13;
  if (std::memcmp(head, tail, kPiece) != 0) return 14;
  for (size_t i = 0; i < kPiece; ++i) {
    if (plain_back[i] != pattern(i)) return 15;
  }
  (*e)->Shutdown();
  return 0;
}

// Over the locked-memory limit only a prefix is registered; the rest of the
// memory still works as plain buffers. Runs in a child that lowers the limit
// and, when root (whom the limit does not bind), becomes nobody.
TEST(UringEngine, OverTheLockedMemoryLimitAPrefixIsRegisteredAndTheRestStaysPlain) {
  ScratchFile f;
  EXPECT_EXIT(_exit(RegisterOverTheLimit(f.fd)), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kvtier::internal
