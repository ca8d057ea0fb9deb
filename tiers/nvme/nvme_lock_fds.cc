#include "tiers/nvme/nvme_lock_fds.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>

namespace kvtier::internal {
namespace {

// fd + 1 of each listed descriptor; 0 is a free slot. Atomics, not a mutex:
// the child handler runs after fork, where a mutex may be held for ever.
std::array<std::atomic<int>, 256> g_listed{};

void LetGoInChild() {
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) return;
  for (std::atomic<int>& slot : g_listed) {
    const int v = slot.load(std::memory_order_relaxed);
    if (v > 0) (void)dup3(null_fd, v - 1, O_CLOEXEC);
  }
  close(null_fd);
}

}  // namespace

void ListLockFd(int fd) {
  static const int registered = pthread_atfork(nullptr, nullptr, LetGoInChild);
  (void)registered;
  for (std::atomic<int>& slot : g_listed) {
    int free_slot = 0;
    if (slot.compare_exchange_strong(free_slot, fd + 1)) return;
  }
}

void UnlistLockFd(int fd) {
  for (std::atomic<int>& slot : g_listed) {
    int mine = fd + 1;
    if (slot.compare_exchange_strong(mine, 0)) return;
  }
}

}  // namespace kvtier::internal
