// BlockIndex: what the runtime knows about every stored block: which tiers
// hold it, whether it is still being filled, who pins it, its parent and how
// many children it has, and per tier the recency of its blocks and the set
// of its leaves, which eviction walks.
//
// The prefix rule lives here: a lookup stops at the first key that is absent,
// and a block may leave its last tier only when it has no children, so no
// tier keeps a block that no lookup can reach. Not thread-safe: the runtime
// holds its mutex around every call.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/ns_key.h"
#include "kvtier/options.h"
#include "policy/sharded_map.h"

namespace kvtier::internal {

inline constexpr uint32_t kNoSlot = UINT32_MAX;

enum class EntryState : uint8_t {
  kFilling,  // bytes are being copied into the hub; invisible to lookups
  kReady,
};

struct IndexEntry {
  NsKey id;
  IndexEntry* parent = nullptr;  // the block before this one, when stored
  EntryState state = EntryState::kFilling;
  uint32_t locations = 0;        // bit t: tier t holds a verified copy
  uint32_t host_slot = kNoSlot;  // hub slot when bit 0 is set (or while filling)
  uint64_t bytes = 0;
  // Payload checksum, taken when the block first leaves the hub and checked
  // whenever it comes back, whatever the tier it was read from.
  std::optional<uint64_t> checksum;
  uint32_t pins = 0;  // lookups, loads, moves and saves in progress
  // Of the pins, those of saves about to hang new blocks off this entry
  // (RunSave, from admission to reservation). Eviction may move such an
  // entry to another tier, but never drop its last copy.
  uint32_t save_holds = 0;
  bool moving = false;                            // selected by an eviction pass
  // The mover's moves of it to the next tier that failed in a row: writes,
  // and reads of it with an I/O error.
  uint8_t failed_moves = 0;
  uint32_t children = 0;                          // stored entries whose parent is this one
  std::array<uint32_t, kMaxTiers> children_in{};  // of those, how many are in tier t
  // Of the children, those a save is copying in (kFilling, set by RunSave):
  // not stored yet, so a Remove of this entry is told to retry (Busy).
  uint32_t filling_children = 0;
  uint64_t last_access_ns = 0;
  // When a copy of it in a tier with an expiry (TierCapabilities::expiry_ms)
  // was last written or read by this process; 0: never. An adopted copy is
  // of unknown age, so it keeps an older time (or 0) and is written again
  // sooner rather than later.
  uint64_t expiring_touch_ns = 0;
  // The last use that ended at this block: a load whose deepest hit it was,
  // or its being stored when it had no copy. Tiers that refresh only the
  // deepest hit (BlockIndex::set_deepest_only) know this as its last use.
  uint64_t deepest_use_ns = 0;
  // What the policies know of the block (BlockMeta): its position in its
  // chain, how often lookups named and found it, and the Save hints.
  uint64_t inserted_ns = 0;
  uint64_t session_id = 0;       // Save hint; 0 = none
  float expected_reuse = -1.0f;  // Save hint; negative = none
  uint32_t depth = 0;            // root = 0
  uint32_t sightings = 0;        // lookups that named it while indexed
  uint32_t hits = 0;             // lookups that found it
  bool is_tail = false;          // last block of the Save that stored it
  // A part of a state checkpoint (Runtime::SaveState): its first part hangs
  // off the boundary block, each further part off the one before.
  bool is_checkpoint = false;
  // A block (not a part) whose checkpoint's first part is indexed: only then
  // may a lookup find its checkpoint stored (and hash the parts' keys).
  bool first_part_indexed = false;
  // A block adopted from a lower tier (RuntimeImpl::AdoptStoredBlocks)
  // whose checkpoint no lookup has asked the lower tiers for yet.
  bool state_unasked = false;
  // Recency per tier: the index's use counter when the entry entered the
  // tier or was last touched; larger = more recent.
  std::array<uint64_t, kMaxTiers> stamp{};

  bool In(size_t tier) const { return (locations >> tier) & 1U; }
  // The fastest tier holding a copy; REQUIRES: locations != 0.
  uint32_t FastestTier() const { return static_cast<uint32_t>(__builtin_ctz(locations)); }
};

// Told of every change to a tier's recency list, so eviction policies that
// keep their own state stay in step with the index. Called under the same
// lock as the index.
class IndexObserver {
 public:
  virtual ~IndexObserver() = default;
  virtual void OnAdd(const IndexEntry& e, size_t tier) = 0;
  // Must not throw: the index has let the copy go by then.
  virtual void OnDrop(const IndexEntry& e, size_t tier) noexcept = 0;
  virtual void OnTouch(const IndexEntry& e, size_t tier) = 0;
};

class BlockIndex {
 public:
  explicit BlockIndex(size_t tier_count) : tier_count_(tier_count) {}
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // `observer` (may be null, not owned) hears of every AddLocation,
  // DropLocation and Touch from now on.
  void set_observer(IndexObserver* observer) { observer_ = observer; }
  // Bit t: tier t refreshes a block's recency only when it is the deepest
  // hit of a use (flop_aware, after Marconi): a prefix used on the way to
  // its children ages as if unused, so it leaves soon after them.
  void set_deepest_only(uint32_t tiers) { deepest_only_ = tiers; }

  IndexEntry* Find(const NsKey& id);
  // Adds a kFilling entry under `parent` (may be null) at depth
  // parent->depth + 1 (0 without a parent); `part`: a part of a state
  // checkpoint (IndexEntry::is_checkpoint). REQUIRES: absent.
  IndexEntry* Insert(const NsKey& id, IndexEntry* parent, uint64_t bytes, bool part = false);
  // Removes the entry, and then any ancestor left with no copy, child or
  // pin. REQUIRES: no children, no locations, no pins.
  void Erase(IndexEntry* e);

  // DropLocation throws (out of memory) only before it changes anything: a
  // copy's room (a hub slot) is given back after it, never before.
  void AddLocation(IndexEntry* e, size_t tier, uint64_t now_ns);
  void DropLocation(IndexEntry* e, size_t tier);
  // Marks a use: the entry becomes most recent in every tier holding it,
  // except, unless it is the `deepest` hit of the use, in the tiers that
  // refresh only that one.
  void Touch(IndexEntry* e, uint64_t now_ns, bool deepest);

  // Up to `max` ready, not-moving entries of `tier` pinned by no more than
  // saves holding them (IndexEntry::save_holds), least recent
  // first, that are leaves within that tier once the victims chosen before
  // them are gone (so a whole chain can leave in one batch, children first),
  // and for which `may_drop(entry, children_chosen)` holds. Examines at most
  // `scan_limit` entries, all of them such leaves; an entry with children in
  // the tier is never examined (nor counted), so however long the chains and
  // in whatever order their blocks were used, only leaves that are pinned,
  // moving or refused by `may_drop` can use up the scan.
  using DropCheck = std::function<bool(const IndexEntry&, uint32_t children_chosen)>;
  std::vector<IndexEntry*> Victims(size_t tier, size_t max, size_t scan_limit,
                                   const DropCheck& may_drop) const;

  // True when `pred` holds for an entry with no child in `tier`.
  bool AnyLeaf(size_t tier, const std::function<bool(const IndexEntry&)>& pred) const {
    for (const auto& [stamp, e] : leaves_[tier]) {
      if (pred(*e)) return true;
    }
    return false;
  }

  // The ready entries no tier but `tier` holds and no eviction pass is
  // moving, in no set order.
  std::vector<IndexEntry*> OnlyIn(size_t tier) const;

  size_t size() const { return map_.size(); }
  uint64_t blocks_in(size_t tier) const { return blocks_in_[tier]; }
  uint64_t bytes_in(size_t tier) const { return bytes_in_[tier]; }
  // Entries of `tier` with no child in it (eviction's candidates).
  size_t leaves_in(size_t tier) const { return leaves_[tier].size(); }

 private:
  static bool IsLeaf(const IndexEntry& e, size_t tier) {
    return e.In(tier) && e.children_in[tier] == 0;
  }

  size_t tier_count_;
  IndexObserver* observer_ = nullptr;
  uint32_t deepest_only_ = 0;
  // Sharded: the index grows under the runtime's lock (policy/sharded_map.h).
  ShardedMap<NsKey, std::unique_ptr<IndexEntry>, NsKeyHash> map_;
  uint64_t clock_ = 0;  // last stamp handed out
  // Per tier, the leaves (IsLeaf) by stamp: least recent first.
  std::array<std::map<uint64_t, IndexEntry*>, kMaxTiers> leaves_;
  std::array<uint64_t, kMaxTiers> blocks_in_{};
  std::array<uint64_t, kMaxTiers> bytes_in_{};
};

}  // namespace kvtier::internal
