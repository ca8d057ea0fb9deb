#include "tests/core/alloc_failure.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

// < 0: disarmed. Else the number of allocations to let through before one
// throws; it then disarms itself, so a failure is injected once per arming.
std::atomic<long> g_allocs_left{-1};
std::atomic<bool> g_fail_all{false};
std::atomic<long> g_every_nth{0};  // 0: off
std::atomic<long> g_count{0};
std::atomic<bool> g_injected{false};
thread_local bool t_fail_here = false;
thread_local long t_allocs_left = -1;  // as g_allocs_left, for this thread's allocations

void* Allocate(std::size_t n) {
  const long nth = g_every_nth.load(std::memory_order_relaxed);
  if (t_fail_here || (t_allocs_left >= 0 && t_allocs_left-- == 0) ||
      g_fail_all.load(std::memory_order_relaxed) ||
      (nth > 0 && g_count.fetch_add(1, std::memory_order_relaxed) % nth == nth - 1) ||
      (g_allocs_left.load(std::memory_order_relaxed) >= 0 &&
       g_allocs_left.fetch_sub(1, std::memory_order_relaxed) == 0)) {
    g_injected.store(true, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) { return Allocate(n); }
void* operator new[](std::size_t n) { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace kvtier::testing {

void FailAllocationAfter(long n) { g_allocs_left.store(n); }

void FailEveryAllocation() { g_fail_all.store(true); }

void FailAllocationsOnThisThread(bool on) { t_fail_here = on; }

void FailAllocationAfterOnThisThread(long n) { t_allocs_left = n; }

void FailEveryNthAllocation(long n) {
  g_count.store(0);
  g_every_nth.store(n);
}

bool DisarmAllocationFailures() {
  g_fail_all.store(false);
  g_every_nth.store(0);
  g_allocs_left.store(-1);
  t_allocs_left = -1;
  return g_injected.exchange(false);
}

}  // namespace kvtier::testing
