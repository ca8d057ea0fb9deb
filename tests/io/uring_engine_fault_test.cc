// The io_uring engine under failure: allocation failing inside Submit, a
// completion callback that throws, an owner thread that does not start, and
// a kernel that refuses submits for want of memory.
// Global operator new is replaced in this binary so a test can make the
// n-th allocation of its own thread fail.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "io/io_engine.h"
#include "tests/io/uring_test_util.h"
#include "tests/support/time_scale.h"

// The sanitizers bring their own operator new and check that frees match
// allocations; under them the replacement (and its test) is left out.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVTIER_REPLACED_NEW 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVTIER_REPLACED_NEW 0
#endif
#endif
#ifndef KVTIER_REPLACED_NEW
#define KVTIER_REPLACED_NEW 1
#endif

namespace {
// Allocations of this thread left before one fails; 0: none fails.
thread_local int fail_in = 0;
}  // namespace

#if KVTIER_REPLACED_NEW
void* operator new(std::size_t n) {
  if (fail_in > 0 && --fail_in == 0) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace kvtier::internal {
namespace {

std::chrono::steady_clock::time_point SteadyClockNow() { return std::chrono::steady_clock::now(); }

IoRequest Write(int fd, uint64_t offset, iovec buf, uint64_t id,
                std::function<void(const IoCompletion&)> done) {
  return IoRequest{IoOp::kWrite, fd, offset, {buf}, id, std::move(done)};
}

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// Failing any one allocation inside Submit queues nothing and runs no
// `done`: the caller may then finish the requests itself.
TEST(UringEngineFault, SubmitQueuesAllOrNoneWhenAllocationFails) {
  if (!KVTIER_REPLACED_NEW) GTEST_SKIP() << "operator new is not replaced under a sanitizer";
  ScratchFile f;
  std::vector<char> buf(4096, 'w');
  int refused = 0;
  for (int k = 1; k <= 12; ++k) {
    auto e = MakeEngine({.queue_depth = 4});
    ASSERT_TRUE(e);
    std::atomic<int> dones{0};
    std::vector<IoRequest> reqs(3);
    for (uint64_t i = 0; i < reqs.size(); ++i) {
      reqs[i] = Write(f.fd, i * 4096, {buf.data(), 4096}, i,
                      [&dones](const IoCompletion&) { dones.fetch_add(1); });
    }
    Status st;
    bool threw = false;
    fail_in = k;
    try {
      st = e->Submit(std::move(reqs));
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    const bool hit = fail_in == 0;
    fail_in = 0;
    e->Shutdown();  // drains whatever was queued
    EXPECT_FALSE(threw) << "allocation " << k;
    if (hit) {
      ++refused;
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << k << ": " << st.ToString();
      EXPECT_EQ(dones.load(), 0) << "allocation " << k << " failed, yet requests ran";
    } else {
      EXPECT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(dones.load(), 3);
    }
  }
  EXPECT_GT(refused, 0) << "no allocation inside Submit was failed";
}

// What a completion callback throws is caught on the engine's thread: the
// next request still completes and Shutdown returns.
TEST(UringEngineFault, CallbackThatThrowsDoesNotEndTheEngine) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  ScratchFile f;
  std::vector<char> buf(4096, 'c');
  std::promise<IoCompletion> last;
  std::vector<IoRequest> reqs(3);
  reqs[0] = Write(f.fd, 0, {buf.data(), 4096}, 1,
                  [](const IoCompletion&) { throw std::runtime_error("boom"); });
  reqs[1] = Write(f.fd, 4096, {buf.data(), 4096}, 2, [](const IoCompletion&) { throw 42; });
  ASSERT_TRUE(e->Submit(std::move(reqs)).ok());
  std::vector<IoRequest> next(1);
  next[0] = Write(f.fd, 8192, {buf.data(), 4096}, 3,
                  [&last](const IoCompletion& c) { last.set_value(c); });
  ASSERT_TRUE(e->Submit(std::move(next)).ok());
  auto fut = last.get_future();
  ASSERT_EQ(fut.wait_for(kvtier::testing::Scaled(std::chrono::seconds(5))),
            std::future_status::ready);
  IoCompletion c = fut.get();
  EXPECT_TRUE(c.status.ok()) << c.status.ToString();
  EXPECT_EQ(c.id, 3u);
  e->Shutdown();
}

// The kernel refusing a submit for want of memory (-EAGAIN, -ENOMEM) is
// waited out: the entries stay in the ring, the requests queued behind them
// are not failed, and every write lands.
void SubmitRefusedThenTaken(int refusal) {
  ScratchFile f;
  std::atomic<int> calls{0};
  auto e = TEST_NewUringEngine({.queue_depth = 2}, nullptr, [&calls, refusal] {
    // Call 1 is the loop's first wait, before anything is submitted.
    const int n = calls.fetch_add(1) + 1;
    return n >= 2 && n <= 7 ? -refusal : 0;
  });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const auto until = SteadyClockNow() + kvtier::testing::Scaled(std::chrono::seconds(5));
  while (calls.load() == 0 && SteadyClockNow() < until) std::this_thread::yield();
  constexpr int kWrites = 6;
  std::vector<std::vector<char>> bufs;
  std::vector<std::promise<IoCompletion>> done(kWrites);
  std::vector<IoRequest> reqs(kWrites);
  for (int i = 0; i < kWrites; ++i) {
    bufs.emplace_back(4096, static_cast<char>('a' + i));
    reqs[i] = Write(f.fd, uint64_t(i) * 4096, {bufs.back().data(), 4096}, i,
                    [&done, i](const IoCompletion& c) { done[i].set_value(c); });
  }
  ASSERT_TRUE((*e)->Submit(std::move(reqs)).ok());
  for (int i = 0; i < kWrites; ++i) {
    auto fut = done[i].get_future();
    ASSERT_EQ(fut.wait_until(until), std::future_status::ready) << "write " << i;
    IoCompletion c = fut.get();
    EXPECT_TRUE(c.status.ok()) << "write " << i << ": " << c.status.ToString();
    EXPECT_EQ(c.bytes, 4096u);
  }
  EXPECT_GE(calls.load(), 8) << "the refusals were not all seen";
  (*e)->Shutdown();
  std::vector<char> back(4096);
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_EQ(pread(f.fd, back.data(), back.size(), i * 4096), 4096);
    EXPECT_EQ(back, bufs[i]) << "write " << i;
  }
}

// A submit that fails for another reason (here -EBADR), again and again:
// what the kernel completes meanwhile is still reaped and answered. The
// loop used to go straight back to the failing submit, spinning, and a read
// that completed was never answered.
TEST(UringEngineFault, CompletionsAreReapedWhileSubmitsKeepFailing) {
  std::atomic<int> calls{0};
  std::atomic<bool> broken{false};
  auto e = TEST_NewUringEngine({.queue_depth = 4}, nullptr, [&] {
    calls.fetch_add(1);
    return broken.load() ? -EBADR : 0;
  });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  int a[2], b[2];
  ASSERT_EQ(pipe(a), 0);
  ASSERT_EQ(pipe(b), 0);
  std::vector<char> back_a(4096), back_b(4096);
  std::promise<IoCompletion> done_a, done_b;
  auto read = [](int fd, std::vector<char>& into, std::promise<IoCompletion>& done) {
    std::vector<IoRequest> r(1);
    r[0] = IoRequest{IoOp::kRead,
                     fd,
                     static_cast<uint64_t>(-1),
                     {{into.data(), into.size()}},
                     1,
                     [&done](const IoCompletion& c) { done.set_value(c); }};
    return r;
  };
  ASSERT_TRUE((*e)->Submit(read(a[0], back_a, done_a)).ok());
  // The read is in the kernel once the loop waits with it (its second wait).
  const auto until = SteadyClockNow() + kvtier::testing::Scaled(std::chrono::seconds(5));
  while (calls.load() < 2 && SteadyClockNow() < until) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  broken = true;
  ASSERT_TRUE((*e)->Submit(read(b[0], back_b, done_b)).ok());  // wakes the loop into the fault
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string bytes(4096, 'a');
  ASSERT_EQ(write(a[1], bytes.data(), bytes.size()), 4096);
  auto fut = done_a.get_future();
  const bool answered = fut.wait_until(until) == std::future_status::ready;
  const int calls_while_broken = calls.load();
  broken = false;
  ASSERT_EQ(write(b[1], bytes.data(), bytes.size()), 4096);  // lets the second read end too
  ASSERT_TRUE(answered) << "a completed read was not reaped";
  IoCompletion c = fut.get();
  EXPECT_TRUE(c.status.ok()) << c.status.ToString();
  EXPECT_EQ(c.bytes, 4096u);
  EXPECT_EQ(std::string(back_a.begin(), back_a.end()), bytes);
  // About 100 ms of failing submits, with pauses between: not a spin.
  EXPECT_LT(calls_while_broken, 1000);
  (*e)->Shutdown();
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}

TEST(UringEngineFault, SubmitRefusedWithEagainIsRetried) { SubmitRefusedThenTaken(EAGAIN); }

TEST(UringEngineFault, SubmitRefusedWithEnomemIsRetried) { SubmitRefusedThenTaken(ENOMEM); }

// A thread the system refuses to start is an error from the factory, not an
// exception, and leaves no file descriptor behind.
TEST(UringEngineFault, ThreadThatFailsToStartIsResourceExhausted) {
  const int before = OpenFds();
  auto e = TEST_NewUringEngine({}, [](std::function<void()>) -> std::thread {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  });
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kResourceExhausted) << e.status().ToString();
  EXPECT_NE(std::string(e.status().message()).find("thread"), std::string::npos)
      << e.status().ToString();
  EXPECT_EQ(OpenFds(), before);
}

}  // namespace
}  // namespace kvtier::internal
