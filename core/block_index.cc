#include "core/block_index.h"

#include <cstdlib>

namespace kvtier::internal {

IndexEntry* BlockIndex::Find(const NsKey& id) {
  auto it = map_.find(id);
  return it == map_.end() ? nullptr : it->second.get();
}

IndexEntry* BlockIndex::Insert(const NsKey& id, IndexEntry* parent, uint64_t bytes) {
  auto entry = std::make_unique<IndexEntry>();
  entry->id = id;
  entry->parent = parent;
  entry->bytes = bytes;
  entry->depth = parent != nullptr ? parent->depth + 1 : 0;
  if (parent != nullptr) ++parent->children;
  IndexEntry* raw = entry.get();
  map_.emplace(id, std::move(entry));
  return raw;
}

void BlockIndex::Erase(IndexEntry* e) {
  // Erasing an entry with children would strand them; with locations or pins
  // it would leak a slot or a copy in flight. All are runtime bugs.
  if (e->children != 0 || e->locations != 0 || e->pins != 0) std::abort();
  IndexEntry* parent = e->parent;
  map_.erase(e->id);
  // A parent that lost every copy stays only to keep its children reachable
  // in the chain; with its last child gone it is erased too.
  while (parent != nullptr) {
    --parent->children;
    IndexEntry* up = parent->parent;
    if (parent->children != 0 || parent->locations != 0 || parent->pins != 0 ||
        parent->state != EntryState::kReady) {
      break;
    }
    map_.erase(parent->id);
    parent = up;
  }
}

void BlockIndex::AddLocation(IndexEntry* e, size_t tier, uint64_t now_ns) {
  if (e->In(tier)) return;
  e->locations |= 1U << tier;
  if (e->parent != nullptr) ++e->parent->children_in[tier];
  ++blocks_in_[tier];
  bytes_in_[tier] += e->bytes;
  e->last_access_ns = now_ns;
  LinkFront(e, tier);
  if (observer_ != nullptr) observer_->OnAdd(*e, tier);
}

void BlockIndex::DropLocation(IndexEntry* e, size_t tier) {
  if (!e->In(tier)) return;
  e->locations &= ~(1U << tier);
  if (e->parent != nullptr) --e->parent->children_in[tier];
  --blocks_in_[tier];
  bytes_in_[tier] -= e->bytes;
  Unlink(e, tier);
  if (observer_ != nullptr) observer_->OnDrop(*e, tier);
}

void BlockIndex::Touch(IndexEntry* e, uint64_t now_ns) {
  e->last_access_ns = now_ns;
  for (size_t t = 0; t < tier_count_; ++t) {
    if (!e->In(t)) continue;
    if (observer_ != nullptr) observer_->OnTouch(*e, t);
    if (head_[t] == e) continue;
    Unlink(e, t);
    LinkFront(e, t);
  }
}

std::vector<IndexEntry*> BlockIndex::Victims(size_t tier, size_t max, size_t scan_limit,
                                             const DropCheck& may_drop) const {
  std::vector<IndexEntry*> out;
  std::unordered_map<const IndexEntry*, uint32_t> chosen_children;
  size_t scanned = 0;
  for (IndexEntry* e = tail_[tier]; e != nullptr && out.size() < max && scanned < scan_limit;
       e = e->prev[tier], ++scanned) {
    if (e->state != EntryState::kReady || e->pins != 0 || e->moving) continue;
    auto it = chosen_children.find(e);
    uint32_t chosen = it == chosen_children.end() ? 0 : it->second;
    if (e->children_in[tier] != chosen) continue;  // leaves first within the tier
    if (!may_drop(*e, chosen)) continue;
    out.push_back(e);
    if (e->parent != nullptr) ++chosen_children[e->parent];
  }
  return out;
}

void BlockIndex::LinkFront(IndexEntry* e, size_t tier) {
  e->prev[tier] = nullptr;
  e->next[tier] = head_[tier];
  if (head_[tier] != nullptr) head_[tier]->prev[tier] = e;
  head_[tier] = e;
  if (tail_[tier] == nullptr) tail_[tier] = e;
}

void BlockIndex::Unlink(IndexEntry* e, size_t tier) {
  if (e->prev[tier] != nullptr) e->prev[tier]->next[tier] = e->next[tier];
  else head_[tier] = e->next[tier];
  if (e->next[tier] != nullptr) e->next[tier]->prev[tier] = e->prev[tier];
  else tail_[tier] = e->prev[tier];
  e->prev[tier] = e->next[tier] = nullptr;
}

}  // namespace kvtier::internal
