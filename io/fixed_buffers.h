// How the io_uring engine cuts the ranges it is asked to register into
// fixed buffers the kernel accepts, and the budgets it tries in turn.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

namespace kvtier::internal {

// The kernel refuses fixed buffers over 1 GiB and more than 16384 of them.
inline constexpr uint64_t kMaxFixedBufferBytes = 1ULL << 30;
inline constexpr size_t kMaxFixedBuffers = 16384;
inline constexpr uint64_t kFixedPageBytes = 4096;

// `ranges` cut into whole pages of at most kMaxFixedBufferBytes each, at most
// kMaxFixedBuffers pieces and `budget` bytes in all; a range's tail shorter
// than a page is left out.
std::vector<iovec> FixedChunks(std::span<const iovec> ranges, uint64_t budget);

uint64_t IovecBytes(std::span<const iovec> v);

// The budgets registration tries in turn for `total` bytes under a
// locked-memory limit of `memlock_limit` (UINT64_MAX: none): everything
// (unless an unprivileged process is over the limit: trying would fault in
// and pin memory only to give it back), the limit, then halves of it, down
// to a page and at most 8 in all.
std::vector<uint64_t> RegistrationBudgets(uint64_t total, uint64_t memlock_limit, bool privileged);
// The same for this process: its RLIMIT_MEMLOCK, privileged when it holds
// CAP_IPC_LOCK in its effective set (the kernel then does not charge pinned
// memory to the limit).
std::vector<uint64_t> RegistrationBudgets(uint64_t total);

}  // namespace kvtier::internal
