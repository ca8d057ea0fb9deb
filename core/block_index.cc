#include "core/block_index.h"

#include <cstdlib>
#include <queue>
#include <utility>

namespace kvtier::internal {

IndexEntry* BlockIndex::Find(const NsKey& id) {
  std::unique_ptr<IndexEntry>* e = map_.Find(id);
  return e == nullptr ? nullptr : e->get();
}

namespace {

// Whether `e` is the first part of its parent's state checkpoint.
bool FirstPart(const IndexEntry& e) {
  return e.is_checkpoint && e.parent != nullptr && !e.parent->is_checkpoint;
}

}  // namespace

IndexEntry* BlockIndex::Insert(const NsKey& id, IndexEntry* parent, uint64_t bytes, bool part) {
  auto entry = std::make_unique<IndexEntry>();
  entry->id = id;
  entry->parent = parent;
  entry->bytes = bytes;
  entry->depth = parent != nullptr ? parent->depth + 1 : 0;
  entry->is_checkpoint = part;
  IndexEntry* raw = entry.get();
  // Indexed before the parent counts it: an insert that runs out of memory
  // leaves the parent as it was.
  map_.TryEmplace(id, std::move(entry));
  if (parent != nullptr) ++parent->children;
  if (FirstPart(*raw)) parent->first_part_indexed = true;
  return raw;
}

void BlockIndex::Erase(IndexEntry* e) {
  // Erasing an entry with children would strand them; with locations or pins
  // it would leak a slot or a copy in flight. All are runtime bugs.
  if (e->children != 0 || e->locations != 0 || e->pins != 0) std::abort();
  IndexEntry* parent = e->parent;
  bool first_part = FirstPart(*e);
  map_.Erase(e->id);
  // A parent that lost every copy stays only to keep its children reachable
  // in the chain; with its last child gone it is erased too.
  while (parent != nullptr) {
    --parent->children;
    if (first_part) parent->first_part_indexed = false;
    first_part = FirstPart(*parent);
    IndexEntry* up = parent->parent;
    if (parent->children != 0 || parent->locations != 0 || parent->pins != 0 ||
        parent->state != EntryState::kReady) {
      break;
    }
    map_.Erase(parent->id);
    parent = up;
  }
}

void BlockIndex::AddLocation(IndexEntry* e, size_t tier, uint64_t now_ns) {
  if (e->In(tier)) return;
  const uint64_t stamp = clock_ + 1;
  IndexEntry* p = e->parent;
  const bool leaf = e->children_in[tier] == 0;  // a leaf there once added
  const bool parent_was_leaf = p != nullptr && IsLeaf(*p, tier);
  // Its leaf node: the parent's, which stops being a leaf (a chain growing
  // by its tail allocates nothing), else allocated before anything changes:
  // out of memory leaves the index as it was. Only the observer (a policy)
  // may throw after, with the copy indexed.
  std::map<uint64_t, IndexEntry*>::node_type node;
  if (leaf && !parent_was_leaf) {
    std::map<uint64_t, IndexEntry*> one;
    node = one.extract(one.emplace(stamp, e).first);
  }
  // Stored anew: a use. A copy made from another tier (a move, or staging
  // for a load) is not: what it was used for is the Touch that follows.
  if (e->locations == 0) e->deepest_use_ns = now_ns;
  e->locations |= 1U << tier;
  if (p != nullptr) {
    if (parent_was_leaf) {
      auto parents = leaves_[tier].extract(p->stamp[tier]);
      if (leaf) node = std::move(parents);
    }
    ++p->children_in[tier];
  }
  ++blocks_in_[tier];
  bytes_in_[tier] += e->bytes;
  e->last_access_ns = now_ns;
  e->stamp[tier] = clock_ = stamp;
  if (leaf) {
    node.key() = stamp;
    node.mapped() = e;
    leaves_[tier].insert(leaves_[tier].end(), std::move(node));
  }
  if (observer_ != nullptr) observer_->OnAdd(*e, tier);
}

void BlockIndex::DropLocation(IndexEntry* e, size_t tier) {
  if (!e->In(tier)) return;
  IndexEntry* p = e->parent;
  // Left with no child in the tier, the parent becomes a leaf there. Its
  // node is the entry's own when the entry was a leaf (blocks leave leaves
  // first), else allocated before anything changes: out of memory leaves
  // the index as it was.
  const bool parent_leaf = p != nullptr && p->In(tier) && p->children_in[tier] == 1;
  std::map<uint64_t, IndexEntry*>::node_type node;
  if (IsLeaf(*e, tier)) {
    node = leaves_[tier].extract(e->stamp[tier]);
  } else if (parent_leaf) {
    std::map<uint64_t, IndexEntry*> one;
    node = one.extract(one.emplace(p->stamp[tier], p).first);
  }
  e->locations &= ~(1U << tier);
  if (p != nullptr) {
    --p->children_in[tier];
    // The parent keeps the recency it had: its place among the leaves is
    // where its last use puts it.
    if (parent_leaf) {
      node.key() = p->stamp[tier];
      node.mapped() = p;
      leaves_[tier].insert(std::move(node));
    }
  }
  --blocks_in_[tier];
  bytes_in_[tier] -= e->bytes;
  if (observer_ != nullptr) observer_->OnDrop(*e, tier);
}

void BlockIndex::Touch(IndexEntry* e, uint64_t now_ns, bool deepest) {
  e->last_access_ns = now_ns;
  if (deepest) e->deepest_use_ns = now_ns;
  for (size_t t = 0; t < tier_count_; ++t) {
    if (!e->In(t) || (!deepest && ((deepest_only_ >> t) & 1U) != 0)) continue;
    if (observer_ != nullptr) observer_->OnTouch(*e, t);
    const uint64_t stamp = ++clock_;
    if (IsLeaf(*e, t)) {
      // Re-keyed in place: a hit costs no allocation. The newest stamp goes last.
      auto node = leaves_[t].extract(e->stamp[t]);
      node.key() = stamp;
      leaves_[t].insert(leaves_[t].end(), std::move(node));
    }
    e->stamp[t] = stamp;
  }
}

std::vector<IndexEntry*> BlockIndex::Victims(size_t tier, size_t max, size_t scan_limit,
                                             const DropCheck& may_drop) const {
  std::vector<IndexEntry*> out;
  std::unordered_map<const IndexEntry*, uint32_t> chosen_children;
  // Parents whose every child in the tier has been chosen: leaves from now
  // on, merged into the walk at their own recency (the oldest next, when
  // they are older than where the walk is).
  using Stamped = std::pair<uint64_t, IndexEntry*>;
  std::priority_queue<Stamped, std::vector<Stamped>, std::greater<>> freed;
  auto leaf = leaves_[tier].begin();
  for (size_t scanned = 0; out.size() < max && scanned < scan_limit; ++scanned) {
    IndexEntry* e;
    if (!freed.empty() && (leaf == leaves_[tier].end() || freed.top().first < leaf->first)) {
      e = freed.top().second;
      freed.pop();
    } else if (leaf != leaves_[tier].end()) {
      e = (leaf++)->second;
    } else {
      break;
    }
    if (e->state != EntryState::kReady || e->pins != e->save_holds || e->moving) continue;
    auto it = chosen_children.find(e);
    const uint32_t chosen = it == chosen_children.end() ? 0 : it->second;
    if (!may_drop(*e, chosen)) continue;
    out.push_back(e);
    if (IndexEntry* p = e->parent; p != nullptr) {
      const uint32_t n = ++chosen_children[p];
      if (p->In(tier) && p->children_in[tier] == n) freed.emplace(p->stamp[tier], p);
    }
  }
  return out;
}

std::vector<IndexEntry*> BlockIndex::OnlyIn(size_t tier) const {
  std::vector<IndexEntry*> out;
  map_.ForEach([&](const NsKey&, const std::unique_ptr<IndexEntry>& e) {
    if (e->state == EntryState::kReady && e->locations == (1U << tier) && !e->moving) {
      out.push_back(e.get());
    }
  });
  return out;
}

}  // namespace kvtier::internal
