// A hash map split into a fixed number of std::unordered_map shards, for
// maps that grow to millions of entries under a lock every lookup takes (a
// policy's learner, the runtime's block index). One std::unordered_map
// rehashes all its entries at once when it grows: at 2^23 entries that is
// one stall of 120-600 ms. Split by key hash into kShards, each shard
// rehashes alone, so the longest stall is that of 1/kShards of the entries
// (about 1 ms at 2^23: kvtier-bench growth), and the map's memory is the
// same plus kShards empty shards (224 KiB). Entries never move while in the map
// (they are std::unordered_map nodes), so pointers to them stay valid until
// they are erased. Pure; not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <utility>

namespace kvtier::internal {

template <typename K, typename V, typename Hash = std::hash<K>>
class ShardedMap {
 public:
  using Shard = std::unordered_map<K, V, Hash>;
  using value_type = typename Shard::value_type;  // std::pair<const K, V>
  static constexpr int kShardBits = 12;
  static constexpr size_t kShards = size_t{1} << kShardBits;

  V* Find(const K& k) {
    auto& s = ShardOf(k);
    auto it = s.find(k);
    return it == s.end() ? nullptr : &it->second;
  }
  const V* Find(const K& k) const { return const_cast<ShardedMap*>(this)->Find(k); }
  bool Contains(const K& k) const { return ShardOf(k).count(k) != 0; }

  // The entry of `k`, made from `args` when absent; second: whether it was made.
  template <typename... Args>
  std::pair<value_type*, bool> TryEmplace(const K& k, Args&&... args) {
    auto [it, fresh] = ShardOf(k).try_emplace(k, std::forward<Args>(args)...);
    if (fresh) ++size_;
    return {&*it, fresh};
  }
  V& operator[](const K& k) { return TryEmplace(k).first->second; }

  // Whether `k` was there.
  bool Erase(const K& k) {
    if (ShardOf(k).erase(k) == 0) return false;
    --size_;
    return true;
  }
  // Calls f(key, value) for every entry, in no set order. f must not add
  // or erase entries.
  template <typename F>
  void ForEach(F&& f) {
    for (Shard& s : shards_) {
      for (auto& [k, v] : s) f(k, v);
    }
  }
  template <typename F>
  void ForEach(F&& f) const {
    for (const Shard& s : shards_) {
      for (const auto& [k, v] : s) f(k, v);
    }
  }
  // ForEach over shard `shard` (< kShards) alone: a caller that may drop
  // its lock between shards scans a large map in pieces.
  template <typename F>
  void ForEachIn(size_t shard, F&& f) const {
    for (const auto& [k, v] : shards_[shard]) f(k, v);
  }
  // Erases every entry for which pred(key, value) is true, in no set order;
  // returns how many. pred may change the value but not add or erase entries.
  template <typename P>
  size_t EraseIf(P&& pred) {
    size_t erased = 0;
    for (Shard& s : shards_) {
      for (auto it = s.begin(); it != s.end();) {
        if (pred(it->first, it->second)) {
          it = s.erase(it);
          ++erased;
        } else {
          ++it;
        }
      }
    }
    size_ -= erased;
    return erased;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Entries in the largest shard: what the longest rehash moves.
  size_t LargestShard() const {
    size_t n = 0;
    for (const Shard& s : shards_) n = std::max(n, s.size());
    return n;
  }

 private:
  // The hash's high bits, mixed: std::hash of an integer is the integer, and
  // block ids of a synthetic trace are small and dense.
  static size_t IndexOf(const K& k) {
    const uint64_t h = static_cast<uint64_t>(Hash{}(k)) * 0x9e3779b97f4a7c15ULL;
    return static_cast<size_t>(h >> (64 - kShardBits));
  }
  Shard& ShardOf(const K& k) { return shards_[IndexOf(k)]; }
  const Shard& ShardOf(const K& k) const { return shards_[IndexOf(k)]; }

  std::array<Shard, kShards> shards_;
  size_t size_ = 0;
};

}  // namespace kvtier::internal
