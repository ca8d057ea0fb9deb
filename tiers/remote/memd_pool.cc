#include "tiers/remote/memd_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <list>
#include <new>
#include <string>

namespace kvtier::internal::memd {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

Status MemdPoolOptions::Validate() const {
  if (slot_bytes <= kBlockHeaderBytes || slot_bytes > kMaxBlockPayloadBytes + kBlockHeaderBytes) {
    return Status::InvalidArgument(
        "slot size " + std::to_string(slot_bytes) +
        " must exceed the 64-byte block header and be at most 1 GiB + 64 (the largest "
        "block and its header)");
  }
  const uint64_t stride = (slot_bytes + kPage - 1) / kPage * kPage;
  if (pool_bytes < stride) {
    return Status::InvalidArgument("pool of " + std::to_string(pool_bytes) +
                                   " bytes holds no slot of " + std::to_string(stride) + " bytes");
  }
  if (pool_bytes / stride > (1ull << 31)) {
    return Status::InvalidArgument("pool of " + std::to_string(pool_bytes) + " bytes is " +
                                   std::to_string(pool_bytes / stride) + " slots of " +
                                   std::to_string(stride) + " bytes; at most 2147483648 fit");
  }
  if (!(low_watermark > 0 && low_watermark < high_watermark && high_watermark <= 1)) {
    return Status::InvalidArgument("watermarks must satisfy 0 < low < high <= 1");
  }
  return Status::Ok();
}

Result<std::unique_ptr<MemdPool>> MemdPool::Create(const MemdPoolOptions& options, LogSink* log) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  const uint64_t stride = (options.slot_bytes + kPage - 1) / kPage * kPage;
  const uint64_t count = options.pool_bytes / stride;
  const size_t bytes = static_cast<size_t>(count * stride);
  void* p = MAP_FAILED;
  // Faulting pages in while a block streams in would cost the first write of
  // every slot most of its speed; populate the mapping up front instead.
  const int populate = options.prefault ? MAP_POPULATE : 0;
  // Huge pages cut TLB misses on a pool that is streamed through end to end;
  // the kernel often has none reserved, so fall back to THP advice. The size
  // is named: the default may be 1 GiB, which the length is not a multiple of.
  if (options.hugepages && bytes % (2u << 20) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << MAP_HUGE_SHIFT) | populate, -1, 0);
  }
  const bool huge = p != MAP_FAILED;
  if (!huge) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return FromErrno(errno, "memd pool mmap");
    if (options.hugepages) madvise(p, bytes, MADV_HUGEPAGE);
    // Populate after the advice so transparent huge pages back the pool.
    if (options.prefault) madvise(p, bytes, MADV_POPULATE_WRITE);
  }
  if (log != nullptr) {
    log->Log(LogLevel::kInfo, "memd pool: " + std::to_string(count) + " slots of " +
                                  std::to_string(options.slot_bytes) + " bytes, " +
                                  (huge ? "huge pages" : "4 KiB pages"));
  }
  return std::unique_ptr<MemdPool>(
      new MemdPool(options, static_cast<std::byte*>(p), bytes, stride, count));
}

MemdPool::MemdPool(MemdPoolOptions options, std::byte* base, size_t mapped, uint64_t stride,
                   uint64_t count)
    : options_(options), base_(base), mapped_bytes_(mapped), stride_(stride), meta_(count) {
  slots_.resize(count);
  free_.reserve(count);
  // One entry per slot at most: sized once, the index never rehashes, which
  // would stall every client's requests behind the pool lock at once (a
  // second or so at millions of slots). 8 bytes of buckets per slot.
  index_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    slots_[i] = static_cast<uint32_t>(i);
    free_.push_back(static_cast<uint32_t>(count - 1 - i));
  }
}

MemdPool::~MemdPool() { munmap(base_, mapped_bytes_); }

Result<uint32_t> MemdPool::Reserve(uint64_t stored_bytes) {
  if (stored_bytes > options_.slot_bytes || stored_bytes <= kBlockHeaderBytes) {
    return Status::InvalidArgument("block of " + std::to_string(stored_bytes) +
                                   " bytes does not fit a slot of " +
                                   std::to_string(options_.slot_bytes));
  }
  while (free_.empty()) {
    if (!EvictOne(nullptr)) {
      return Status::ResourceExhausted("every memd slot is reserved or in use");
    }
  }
  const uint32_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void MemdPool::CancelReservation(uint32_t slot) { Release(slot); }

Status MemdPool::Commit(NamespaceId ns, const BlockKey& key, uint32_t slot, uint64_t stored_bytes) {
  auto header = DecodeBlockHeader(SlotBytes(slot, kBlockHeaderBytes));
  Status bad;
  if (!header.ok()) {
    bad = header.status();
  } else if (!(header->ns == ns) || !(header->key == key) ||
             header->payload_bytes + kBlockHeaderBytes != stored_bytes) {
    bad = Status::Corruption("stored block header names another block or size");
  }
  if (!bad.ok()) {
    Release(slot);
    return Status::Corruption(bad.message());
  }
  const FullKey fk{ns, key};
  if (auto it = index_.find(fk); it != index_.end()) Erase(it);  // the older copy goes
  // Out of memory (a fixed message: building one would need memory) leaves
  // the pool consistent, without the block, its slot given back.
  static const Status kOutOfMemory =
      Status::ResourceExhausted("kvtier-memd: out of memory storing the block");
  NamespaceUsage* usage = nullptr;
  std::list<FullKey> node;
  try {
    usage = &usage_[ns.value];
    node.push_back(fk);
  } catch (const std::bad_alloc&) {
    Release(slot);
    return kOutOfMemory;
  }
  lru_.splice(lru_.begin(), node);
  try {
    auto [it, inserted] = index_.emplace(fk, Entry{slot, stored_bytes, lru_.begin()});
    meta_[slot].entry = &*it;
  } catch (const std::bad_alloc&) {
    lru_.pop_front();
    if (usage->blocks == 0) usage_.erase(ns.value);
    Release(slot);
    return kOutOfMemory;
  }
  NamespaceUsage& u = *usage;
  u.ns = ns.value;
  u.blocks += 1;
  u.bytes += stored_bytes - kBlockHeaderBytes;
  EnforceWatermarks(fk);
  return Status::Ok();
}

std::optional<MemdPool::Found> MemdPool::Lookup(NamespaceId ns, const BlockKey& key) {
  auto it = index_.find(FullKey{ns, key});
  if (it == index_.end()) return std::nullopt;
  // A pinned block stays in pinned_; its last Unpin makes it most recent.
  if (meta_[it->second.slot].pins == 0) lru_.splice(lru_.begin(), lru_, it->second.lru);
  return Found{it->second.slot, it->second.stored_bytes};
}

bool MemdPool::Contains(NamespaceId ns, const BlockKey& key) const {
  return index_.count(FullKey{ns, key}) != 0;
}

bool MemdPool::Remove(NamespaceId ns, const BlockKey& key) {
  auto it = index_.find(FullKey{ns, key});
  if (it == index_.end()) return false;
  Erase(it);
  return true;
}

void MemdPool::Pin(uint32_t slot) {
  SlotMeta& m = meta_[slot];
  // Splicing keeps the entry's iterator valid, now pointing into pinned_.
  if (m.pins++ == 0 && m.entry != nullptr) {
    pinned_.splice(pinned_.begin(), lru_, m.entry->second.lru);
  }
}

void MemdPool::Unpin(uint32_t slot) {
  SlotMeta& m = meta_[slot];
  if (--m.pins != 0) return;
  if (m.free_on_unpin) {
    m.free_on_unpin = false;
    free_.push_back(slot);
  } else if (m.entry != nullptr) {
    lru_.splice(lru_.begin(), pinned_, m.entry->second.lru);
  }
}

void MemdPool::Erase(Index::iterator it) {
  NamespaceUsage& u = usage_[it->first.ns.value];
  u.blocks -= 1;
  u.bytes -= it->second.stored_bytes - kBlockHeaderBytes;
  if (u.blocks == 0) usage_.erase(it->first.ns.value);
  const uint32_t slot = it->second.slot;
  (meta_[slot].pins > 0 ? pinned_ : lru_).erase(it->second.lru);
  meta_[slot].entry = nullptr;
  index_.erase(it);
  Release(slot);
}

void MemdPool::Release(uint32_t slot) {
  SlotMeta& m = meta_[slot];
  if (m.pins > 0) {
    m.free_on_unpin = true;
  } else {
    free_.push_back(slot);
  }
}

// lru_ holds only unpinned blocks, so each eviction frees a slot at once
// and the walk never passes over pinned ones.
bool MemdPool::EvictOne(const FullKey* keep) {
  if (lru_.empty() || (keep != nullptr && lru_.back() == *keep)) return false;
  Erase(index_.find(lru_.back()));
  ++evictions_;
  return true;
}

// Reserved and pinned slots count as used but cannot be evicted: with too
// many of them the pool stays above the low mark until they go.
void MemdPool::EnforceWatermarks(const FullKey& keep) {
  const double n = static_cast<double>(slots_.size());
  if (static_cast<double>(used_slots()) <= options_.high_watermark * n) return;
  while (static_cast<double>(used_slots()) > options_.low_watermark * n && EvictOne(&keep)) {
  }
}

Stats MemdPool::GetStats() const {
  Stats s;
  s.slot_bytes = options_.slot_bytes;
  s.slot_count = slots_.size();
  s.used_slots = used_slots();
  s.evictions = evictions_;
  for (const auto& [ns, u] : usage_) s.namespaces.push_back(u);
  return s;
}

}  // namespace kvtier::internal::memd
