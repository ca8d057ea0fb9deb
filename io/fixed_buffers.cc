// Fixed-buffer registration sizes for the io_uring engine (fixed_buffers.h).
#include "io/fixed_buffers.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace kvtier::internal {

std::vector<iovec> FixedChunks(std::span<const iovec> ranges, uint64_t budget) {
  std::vector<iovec> out;
  for (const iovec& r : ranges) {
    auto* p = static_cast<char*>(r.iov_base);
    uint64_t left = r.iov_len;
    while (left >= kFixedPageBytes && budget >= kFixedPageBytes && out.size() < kMaxFixedBuffers) {
      const uint64_t n =
          std::min({left, kMaxFixedBufferBytes, budget}) / kFixedPageBytes * kFixedPageBytes;
      out.push_back({p, n});
      p += n;
      left -= n;
      budget -= n;
    }
  }
  return out;
}

uint64_t IovecBytes(std::span<const iovec> v) {
  uint64_t n = 0;
  for (const iovec& x : v) n += x.iov_len;
  return n;
}

std::vector<uint64_t> RegistrationBudgets(uint64_t total, uint64_t memlock_limit, bool privileged) {
  std::vector<uint64_t> out;
  const bool limited = memlock_limit < total;
  if (!limited || privileged) out.push_back(total);
  if (limited) out.push_back(memlock_limit);
  while (out.size() < 8 && out.back() / 2 >= kFixedPageBytes) out.push_back(out.back() / 2);
  return out;
}

namespace {

// The kernel charges pinned memory to RLIMIT_MEMLOCK unless the task holds
// CAP_IPC_LOCK in its effective set; the user id plays no part (root without
// the capability is charged, a non-root holder is not).
bool HoldsIpcLock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1;
}

}  // namespace

std::vector<uint64_t> RegistrationBudgets(uint64_t total) {
  rlimit lim{};
  const bool known = getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY;
  return RegistrationBudgets(total, known ? uint64_t{lim.rlim_cur} : UINT64_MAX, HoldsIpcLock());
}

}  // namespace kvtier::internal
