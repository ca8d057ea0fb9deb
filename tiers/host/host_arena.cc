#include "tiers/host/host_arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace kvtier::internal {
namespace {

constexpr uint64_t kHugePage = 2ULL << 20;
// MAP_HUGETLB alone takes the system's default huge page size, which may be
// 1 GiB: the kernel would round the mapping up to it, and munmap of the
// 2 MiB-rounded length would then fail and leak the pages. Ask for 2 MiB.
constexpr int kHugeTlb2MiB = MAP_HUGETLB | (21 << MAP_HUGE_SHIFT);

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

Result<std::unique_ptr<HostArena>> HostArena::Create(const HostArenaOptions& options,
                                                     LogSink* log) {
  if (options.slot_bytes == 0) return Status::InvalidArgument("host arena: slot size is 0");
  const uint64_t stride = SlotStride(options.slot_bytes);
  const uint64_t slots = SlotsIn(options.capacity_bytes, options.slot_bytes);
  if (slots == 0) {
    return Status::InvalidArgument("host arena: capacity of " +
                                   std::to_string(options.capacity_bytes) +
                                   " bytes holds no block of " + std::to_string(stride) + " bytes");
  }
  if (slots > kMaxSlots) {
    return Status::InvalidArgument(
        "host arena: capacity of " + std::to_string(options.capacity_bytes) + " bytes is " +
        std::to_string(slots) + " blocks of " + std::to_string(stride) + " bytes; at most " +
        std::to_string(kMaxSlots) + " fit one tier");
  }

  std::unique_ptr<HostArena> arena(new HostArena());
  arena->slot_bytes_ = options.slot_bytes;
  arena->stride_ = stride;
  arena->slot_count_ = static_cast<uint32_t>(slots);
  const uint64_t bytes = RoundUp(slots * stride, kHugePage);

  void* p = MAP_FAILED;
  if (options.hugepages) {
    // Explicit huge pages exist only when the administrator reserved them;
    // without a reservation this fails at once and we fall back.
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | kHugeTlb2MiB, -1,
             0);
    arena->huge_pages_ = p != MAP_FAILED;
  }
  if (p == MAP_FAILED) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return FromErrno(errno, "host arena mmap of " + std::to_string(bytes));
    if (options.hugepages) madvise(p, bytes, MADV_HUGEPAGE);
  }
  arena->base_ = static_cast<std::byte*>(p);
  arena->mapped_bytes_ = bytes;

  if (options.mlock) {
    // mlock also faults every page in, so the first copies run at full speed.
    if (::mlock(p, bytes) == 0) {
      arena->locked_ = true;
    } else if (log != nullptr) {
      log->Log(LogLevel::kWarning,
               "host arena: mlock of " + std::to_string(bytes >> 20) + " MiB refused (" +
                   FromErrno(errno, "mlock").ToString() +
                   "); pages may be swapped and are faulted on first use. Raise "
                   "RLIMIT_MEMLOCK (ulimit -l) to pin the arena.");
    }
  }

  arena->free_.reserve(slots);
  for (uint64_t i = slots; i > 0; --i) arena->free_.push_back(static_cast<uint32_t>(i - 1));
  arena->in_use_.assign(slots, false);
  return arena;
}

HostArena::~HostArena() {
  pin_.reset();  // unregister while the pages are still mapped
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
}

std::optional<uint32_t> HostArena::Allocate() {
  std::lock_guard lock(mu_);
  if (free_.empty()) return std::nullopt;
  uint32_t slot = free_.back();
  free_.pop_back();
  in_use_[slot] = true;
  return slot;
}

void HostArena::Free(uint32_t slot) {
  std::lock_guard lock(mu_);
  if (slot >= slot_count_ || !in_use_[slot]) std::abort();  // a double free is a bug here
  in_use_[slot] = false;
  free_.push_back(slot);
}

uint32_t HostArena::used_slots() const {
  std::lock_guard lock(mu_);
  return slot_count_ - static_cast<uint32_t>(free_.size());
}

}  // namespace kvtier::internal
