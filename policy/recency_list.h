// The order in which the entries of a policy's map of block ids were last
// named, so that a map bounded in size forgets its least recently named
// entries a few at a time instead of clearing itself when full: a policy
// runs inline in every lookup, under the runtime's lock, where clearing
// millions of entries at once stalls every engine thread, and a clear
// forgets everything learned at once. Pure; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "policy/sharded_map.h"

namespace kvtier::internal {

// What a map's value carries (as a member named `recency`) to be ordered.
template <typename Node>
struct RecencyLinks {
  std::pair<const uint64_t, Node>* older = nullptr;
  std::pair<const uint64_t, Node>* newer = nullptr;
};

// An intrusive list over the entries of a ShardedMap<uint64_t, Node>, least
// recently named first. It holds pointers to the entries, which never move
// while in the map (a rehash keeps them in place); so it is neither copied
// nor moved, every entry inserted into the map must be in a chain passed to
// TouchChainAndTrim by the same call, and only this list erases entries.
template <typename Node>
class RecencyList {
 public:
  using Map = ShardedMap<uint64_t, Node>;
  using Entry = typename Map::value_type;

  RecencyList() = default;
  RecencyList(const RecencyList&) = delete;
  RecencyList& operator=(const RecencyList&) = delete;

  // Marks a request's chain (its entries root first) named, leaf first: a
  // parent is then always more recently named than its children and is
  // forgotten after them, so a remembered entry's parent is remembered too.
  // Then trims `map` as Trim does.
  void TouchChainAndTrim(std::span<Entry* const> chain, Map& map, size_t max_size) {
    for (auto e = chain.rbegin(); e != chain.rend(); ++e) Touch(**e);
    Trim(map, max_size);
  }

 private:
  // Makes `e`, new to the list or not, the most recently named.
  void Touch(Entry& e) {
    if (newest_ == &e) return;
    RecencyLinks<Node>& l = e.second.recency;
    if (l.newer != nullptr) Unlink(e);  // only the newest and entries not listed have none
    l.older = newest_;
    (newest_ != nullptr ? newest_->second.recency.newer : oldest_) = &e;
    newest_ = &e;
  }

  // Erases the least recently named entries of `map` (the map this list
  // orders) while it holds more than `max_size`. When every call that
  // inserts entries trims, map.size() stays within max_size between calls
  // and one trim erases at most as many entries as its call inserted.
  void Trim(Map& map, size_t max_size) {
    while (map.size() > max_size && oldest_ != nullptr) {
      const uint64_t id = oldest_->first;  // a copy: erase must not read the erased key
      Unlink(*oldest_);
      map.Erase(id);
    }
  }

  void Unlink(Entry& e) {
    RecencyLinks<Node>& l = e.second.recency;
    (l.older != nullptr ? l.older->second.recency.newer : oldest_) = l.newer;
    (l.newer != nullptr ? l.newer->second.recency.older : newest_) = l.older;
    l = {};
  }

  Entry* oldest_ = nullptr;
  Entry* newest_ = nullptr;
};

}  // namespace kvtier::internal
