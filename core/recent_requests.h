// The engine request ids whose lookups the policies have seen, so that a
// request looked up again (a waiting request the scheduler asks about each
// step, LookupAndPin after a probing Lookup) is not another sighting of its
// blocks. Bounded: past `capacity` ids the oldest are forgotten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_set>

namespace kvtier::internal {

class RecentRequests {
 public:
  explicit RecentRequests(size_t capacity) : capacity_(capacity) {}

  // True unless `id` was seen before and is still remembered. Id 0 (none
  // given) is always new and never remembered.
  bool FirstSighting(uint64_t id) {
    if (id == 0 || capacity_ == 0) return true;
    if (!ids_.insert(id).second) return false;
    order_.push_back(id);
    if (order_.size() > capacity_) {
      ids_.erase(order_.front());
      order_.pop_front();
    }
    return true;
  }

 private:
  size_t capacity_;
  std::unordered_set<uint64_t> ids_;
  std::deque<uint64_t> order_;  // oldest first
};

}  // namespace kvtier::internal
