// HostArena: the pinned host DRAM that every block passes through. One
// mapping cut into equal slots; allocate and free are O(1) (a free stack), so
// the arena never fragments. Slots are 4 KiB-aligned so later tiers can do
// O_DIRECT I/O straight into them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/copy_engine.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct HostArenaOptions {
  uint64_t capacity_bytes = 0;  // whole slots only; the remainder is unused
  uint64_t slot_bytes = 0;      // payload size of one slot; stride rounds up to 4 KiB
  bool hugepages = true;        // MAP_HUGETLB, else madvise(MADV_HUGEPAGE)
  bool mlock = true;            // best effort; a refusal is logged once
};

class HostArena {
 public:
  // Slots are numbered in 32 bits, UINT32_MAX kept for "no slot".
  static constexpr uint64_t kMaxSlots = UINT32_MAX - 1;
  // The bytes one slot of `slot_bytes` takes: rounded up to 4 KiB.
  static constexpr uint64_t SlotStride(uint64_t slot_bytes) {
    return (slot_bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  }
  // The slots `capacity_bytes` holds (Create refuses 0 or more than kMaxSlots).
  static constexpr uint64_t SlotsIn(uint64_t capacity_bytes, uint64_t slot_bytes) {
    return slot_bytes == 0 ? 0 : capacity_bytes / SlotStride(slot_bytes);
  }
  static constexpr uint64_t kSlotAlign = 4096;
  // InvalidArgument when the capacity holds no slot; ResourceExhausted when
  // the mapping fails.
  static Result<std::unique_ptr<HostArena>> Create(const HostArenaOptions& options,
                                                   LogSink* log);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // A free slot, or nullopt when all are in use. Thread-safe.
  std::optional<uint32_t> Allocate();
  // REQUIRES: `slot` came from Allocate() and is not yet freed. Thread-safe.
  void Free(uint32_t slot);

  // The bytes of one slot (slot_bytes long). The caller coordinates access.
  std::span<std::byte> Slot(uint32_t slot) const {
    return {base_ + uint64_t{slot} * stride_, slot_bytes_};
  }

  uint32_t slot_count() const { return slot_count_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint32_t used_slots() const;
  bool huge_pages() const { return huge_pages_; }
  bool locked() const { return locked_; }

  // The whole mapping, for registering it with a device.
  std::span<std::byte> Mapping() const { return {base_, mapped_bytes_}; }
  // Keeps `pin` (a device registration of Mapping()) until the arena is
  // destroyed; it is released before the memory is unmapped. Not thread-safe:
  // call once, before the arena is shared.
  void AdoptPin(std::unique_ptr<HostMemoryPin> pin) { pin_ = std::move(pin); }

 private:
  HostArena() = default;

  std::byte* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t stride_ = 0;
  uint32_t slot_count_ = 0;
  bool huge_pages_ = false;
  bool locked_ = false;
  std::unique_ptr<HostMemoryPin> pin_;  // released before munmap

  mutable std::mutex mu_;
  std::vector<uint32_t> free_;  // guarded by mu_; a stack of free slots
  std::vector<bool> in_use_;    // guarded by mu_; catches double frees
};

}  // namespace kvtier::internal
