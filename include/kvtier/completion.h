// Completion: the handle every asynchronous kvtier call returns.
//
// A completion covers a batch of items (blocks). Each item ends with a Status
// and a byte count, like an I/O completion record {id, status, bytes}. The
// producer holds a CompletionSource; the caller holds Completions (cheap,
// copyable, thread-safe). A source destroyed before it finishes fails its
// remaining items with Cancelled, so no waiter can hang on a lost request.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "kvtier/export.h"
#include "kvtier/status.h"

namespace kvtier {

namespace internal {
struct CompletionState;
}

class KVTIER_EXPORT Completion {
 public:
  Completion() = default;  // an empty handle: Poll() is true, size() is 0

  // True once every item has its result. Never blocks.
  bool Poll() const;
  // Blocks until finished; returns status().
  Status Wait() const;
  // Blocks at most `timeout`; DeadlineExceeded if still running then (the
  // items keep running and finish later). A timeout of a century or more
  // (nanoseconds::max()) waits like Wait().
  Status WaitFor(std::chrono::nanoseconds timeout) const;

  size_t size() const;
  // REQUIRES: Poll(). Result and byte count of item i. Past size(): the
  // call's refusal (a call refused before its items could be allocated has
  // size() 0 and answers each index with why), else InvalidArgument.
  const Status& result(size_t i) const;
  uint64_t bytes(size_t i) const;
  // REQUIRES: Poll(). OK when every item is OK, else the first failure; a
  // call refused before it had any item (no keys) reports why.
  Status status() const;
  // REQUIRES: Poll(). Number of items that ended OK.
  size_t ok_count() const;
  // Layers whose data has landed for every item being copied (loads only;
  // items that failed before the copy are not counted); grows to the layer
  // count. Never blocks.
  uint32_t layers_done() const;

  // Runs `fn` once the results are final: on the finishing thread before any
  // Wait() returns, after every callback registered before it, or right here
  // if the completion is done already. `fn` may read this completion: on
  // that thread it is done already (Poll() is true, Wait() returns at once).
  // `fn` must not block. An exception thrown by `fn` on the finishing thread
  // is dropped (the results stand, waiters wake).
  void OnDone(std::function<void()> fn) const;

 private:
  friend class CompletionSource;
  explicit Completion(std::shared_ptr<internal::CompletionState> s) : state_(std::move(s)) {}
  std::shared_ptr<internal::CompletionState> state_;
};

// Producer side; move-only. Set each item once, then Finish().
class KVTIER_EXPORT CompletionSource {
 public:
  explicit CompletionSource(size_t items);
  CompletionSource(CompletionSource&&) noexcept = default;
  CompletionSource& operator=(CompletionSource&&) noexcept;
  CompletionSource(const CompletionSource&) = delete;
  CompletionSource& operator=(const CompletionSource&) = delete;
  // Fails unfinished items with Cancelled("request dropped") and finishes.
  ~CompletionSource();

  Completion completion() const { return Completion(state_); }
  size_t size() const;

  // Thread-safe; an item set twice keeps its first result.
  void Set(size_t i, Status status, uint64_t bytes = 0);
  void SetAll(const Status& status);
  void SetLayersDone(uint32_t layers);
  // The result item i holds so far: OK until it is Set. Lets a producer
  // account for the outcome before Finish() wakes the waiters.
  Status result(size_t i) const;
  // Items never set become Internal("no result"). Idempotent.
  void Finish();
  // A completion already finished with `status` on every item.
  static Completion Done(size_t items, const Status& status);

 private:
  std::shared_ptr<internal::CompletionState> state_;
};

}  // namespace kvtier
