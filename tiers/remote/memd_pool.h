// The memory of a kvtier-memd server: one mapping (huge pages when the kernel
// has them) cut into fixed slots, each holding one stored block (BlockHeader +
// payload), an index (namespace, key) -> slot with LRU order, high/low
// watermark eviction and per-namespace usage.
//
// A slot moves free -> reserved (PUT_BEGIN granted it; data is landing) ->
// stored (committed under a key) -> free. A stored slot that a reader holds
// pinned (a GET send or an RDMA lease in flight) is dropped from the index at
// once when evicted, removed or replaced, but returns to the free list only
// when its last pin goes, so bytes being sent are never overwritten.
// Eviction takes only stored blocks that nobody holds pinned (evicting a
// pinned one would free nothing), oldest first.
//
// Not thread-safe: the server's single I/O thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ns_key.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::internal::memd {

struct MemdPoolOptions {
  uint64_t pool_bytes = 1ull << 30;           // mapping size; whole slots only
  uint64_t slot_bytes = (4ull << 20) + 4096;  // largest stored block; stride rounds to 4 KiB
  bool hugepages = true;                      // try MAP_HUGETLB, else advise THP
  bool prefault = true;                       // MAP_POPULATE: no page faults while serving
  double high_watermark = 0.95;               // fraction of slots that starts eviction
  double low_watermark = 0.85;                // eviction stops at or below this
  Status Validate() const;
};

class MemdPool {
 public:
  static Result<std::unique_ptr<MemdPool>> Create(const MemdPoolOptions& options, LogSink* log);
  ~MemdPool();
  MemdPool(const MemdPool&) = delete;
  MemdPool& operator=(const MemdPool&) = delete;

  uint64_t slot_bytes() const { return options_.slot_bytes; }
  uint64_t slot_count() const { return slots_.size(); }
  // The mapping, for registering it as an RDMA memory region.
  std::span<std::byte> mapping() { return {base_, mapped_bytes_}; }
  uint64_t SlotOffset(uint32_t slot) const { return uint64_t{slot} * stride_; }

  // A free slot for a stored block of `stored_bytes`, evicting the least
  // recently used unpinned block when none is free. InvalidArgument when the
  // block is larger than a slot; ResourceExhausted when every slot is
  // reserved or pinned (nothing is evicted then).
  Result<uint32_t> Reserve(uint64_t stored_bytes);
  // Returns a reserved slot that will not be committed.
  void CancelReservation(uint32_t slot);
  // REQUIRES: `slot` is reserved. Checks the stored BlockHeader against (ns,
  // key, stored_bytes) and publishes it, replacing any older block of that
  // key. Corruption when the header does not match; the slot is then freed.
  // Above the high watermark, evicts unpinned blocks other than this one
  // until at the low watermark or none is left.
  Status Commit(NamespaceId ns, const BlockKey& key, uint32_t slot, uint64_t stored_bytes);

  struct Found {
    uint32_t slot = 0;
    uint64_t stored_bytes = 0;
  };
  // Looks up a key and marks it most recently used.
  std::optional<Found> Lookup(NamespaceId ns, const BlockKey& key);
  bool Contains(NamespaceId ns, const BlockKey& key) const;
  // Drops a key; false when absent.
  bool Remove(NamespaceId ns, const BlockKey& key);

  std::span<std::byte> SlotBytes(uint32_t slot, uint64_t bytes) {
    return {base_ + SlotOffset(slot), static_cast<size_t>(bytes)};
  }
  // REQUIRES: `slot` holds a stored block (from Lookup). A pinned block is
  // not evicted; one dropped from the index while pinned frees its slot
  // with the last Unpin.
  void Pin(uint32_t slot);
  void Unpin(uint32_t slot);

  Stats GetStats() const;
  // Blocks waiting for eviction, and pinned ones kept out of its reach.
  size_t TEST_Evictable() const { return lru_.size(); }
  size_t TEST_Pinned() const { return pinned_.size(); }
  size_t TEST_IndexBuckets() const { return index_.bucket_count(); }
  uint64_t used_slots() const { return slots_.size() - free_.size(); }

 private:
  using FullKey = internal::NsKey;
  using FullKeyHash = internal::NsKeyHash;
  struct Entry {
    uint32_t slot;
    uint64_t stored_bytes;
    std::list<FullKey>::iterator lru;  // in lru_, or in pinned_ while pinned
  };
  using Index = std::unordered_map<FullKey, Entry, FullKeyHash>;
  struct SlotMeta {
    // 64 bits: every connection may pin one slot many times over (repeated
    // keys of GETs and leases, up to its share each), which 32 could wrap.
    uint64_t pins = 0;
    bool free_on_unpin = false;
    // The index entry stored in this slot; null when the slot holds none.
    // Elements of an unordered_map stay put when it rehashes.
    Index::value_type* entry = nullptr;
  };

  MemdPool(MemdPoolOptions options, std::byte* base, size_t mapped, uint64_t stride,
           uint64_t count);
  void Erase(Index::iterator it);
  void Release(uint32_t slot);
  // Evicts the least recently used unpinned block unless it is `keep`;
  // false when there is none.
  bool EvictOne(const FullKey* keep);
  void EnforceWatermarks(const FullKey& keep);

  const MemdPoolOptions options_;
  std::byte* const base_;
  const size_t mapped_bytes_;
  const uint64_t stride_;
  std::vector<uint32_t> slots_;  // every slot id; size = slot count
  std::vector<uint32_t> free_;
  std::vector<SlotMeta> meta_;
  Index index_;
  // Stored blocks nobody pins, the evictable ones; front = most recently
  // used. Pinned blocks wait in pinned_ and return to the front of lru_
  // with their last Unpin, so eviction never walks past them.
  std::list<FullKey> lru_;
  std::list<FullKey> pinned_;
  std::unordered_map<uint64_t, NamespaceUsage> usage_;
  uint64_t evictions_ = 0;
};

}  // namespace kvtier::internal::memd
