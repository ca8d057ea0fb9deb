#include "kvtier/completion.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier {
namespace internal {

struct CompletionState {
  // Room for two callbacks (the runtime's and an engine's or binding's):
  // registering them allocates nothing, so a producer that registers one
  // after taking a resource cannot fail to give it back.
  explicit CompletionState(size_t n) : results(n), bytes(n, 0), set(n, false) {
    callbacks.reserve(2);
    running.reserve(2);
  }

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> results;
  std::vector<uint64_t> bytes;
  std::vector<bool> set;
  // A whole-call error for a call with no items (Done(0, error)): status()
  // must not say OK for a call that was refused.
  Status refused;
  std::vector<std::function<void()>> callbacks;
  // The callbacks Finish() is running, swapped with `callbacks`, so that
  // while they run `callbacks` still has room for two (a callback a tier
  // call's deadline hands it then allocates nothing either). Only the
  // finishing thread touches it outside a swap.
  std::vector<std::function<void()>> running;
  // Results are final and the callbacks are running; `done` follows. Guarded
  // by mu.
  bool finishing = false;
  // Written under mu; read without it by Poll() and layers_done(), hence
  // acquire/release so a reader that sees `done` also sees the results.
  std::atomic<bool> done{false};
  std::atomic<uint32_t> layers{0};
  // The thread running the callbacks (set before they run): there the
  // results are final already, so a callback reading its own completion
  // (Poll, Wait, result) sees it done instead of waiting for itself.
  std::atomic<std::thread::id> finisher{};

  bool DoneHere() const {
    return done.load(std::memory_order_acquire) ||
           finisher.load(std::memory_order_acquire) == std::this_thread::get_id();
  }
};

}  // namespace internal

namespace {
const Status kEmptyOk;
const Status kNoSuchItem(StatusCode::kInvalidArgument, "no such item in this completion");
}  // namespace

bool Completion::Poll() const { return !state_ || state_->DoneHere(); }

Status Completion::Wait() const {
  if (!state_) return Status::Ok();
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->DoneHere(); });
  lock.unlock();
  return status();
}

Status Completion::WaitFor(std::chrono::nanoseconds timeout) const {
  if (!state_) return Status::Ok();
  // A timeout too long to add to now() (nanoseconds::max() for "forever")
  // would wrap into the past: such a wait is a plain Wait().
  constexpr auto kForever = std::chrono::hours(24 * 365 * 100);
  if (timeout >= kForever) return Wait();
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->DoneHere(); })) {
    return Status::DeadlineExceeded("completion still running after the wait timeout");
  }
  lock.unlock();
  return status();
}

size_t Completion::size() const { return state_ ? state_->results.size() : 0; }

const Status& Completion::result(size_t i) const {
  if (!state_) return kEmptyOk;
  if (i < state_->results.size()) return state_->results[i];
  // A call refused with fewer items than it was asked for (out of memory
  // even for its answer): every item it was asked for failed that way.
  return state_->refused.ok() ? kNoSuchItem : state_->refused;
}

uint64_t Completion::bytes(size_t i) const {
  return state_ && i < state_->bytes.size() ? state_->bytes[i] : 0;
}

Status Completion::status() const {
  if (!state_) return Status::Ok();
  if (!state_->refused.ok()) return state_->refused;
  for (const Status& s : state_->results) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

size_t Completion::ok_count() const {
  if (!state_) return 0;
  size_t n = 0;
  for (const Status& s : state_->results) n += s.ok() ? 1 : 0;
  return n;
}

uint32_t Completion::layers_done() const {
  return state_ ? state_->layers.load(std::memory_order_acquire) : 0;
}

void Completion::OnDone(std::function<void()> fn) const {
  if (state_) {
    std::lock_guard lock(state_->mu);
    // While Finish() runs the callbacks, a new one joins their queue: run
    // here at once it could overtake those still queued (a binding frees
    // what they use from a callback it registers last).
    if (!state_->done.load(std::memory_order_relaxed)) {
      state_->callbacks.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

CompletionSource::CompletionSource(size_t items)
    : state_(std::make_shared<internal::CompletionState>(items)) {}

CompletionSource& CompletionSource::operator=(CompletionSource&& other) noexcept {
  if (this != &other) {
    if (state_) {
      SetAll(Status::Cancelled("request dropped"));
      Finish();
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

CompletionSource::~CompletionSource() {
  if (!state_) return;
  SetAll(Status::Cancelled("request dropped before it finished"));
  Finish();
}

size_t CompletionSource::size() const { return state_->results.size(); }

void CompletionSource::Set(size_t i, Status status, uint64_t bytes) {
  std::lock_guard lock(state_->mu);
  if (state_->finishing || state_->set[i]) return;
  state_->set[i] = true;
  state_->results[i] = std::move(status);
  state_->bytes[i] = bytes;
}

void CompletionSource::SetAll(const Status& status) {
  for (size_t i = 0; i < size(); ++i) Set(i, status);
}

Status CompletionSource::result(size_t i) const {
  std::lock_guard lock(state_->mu);
  return state_->results[i];
}

void CompletionSource::SetLayersDone(uint32_t layers) {
  state_->layers.store(layers, std::memory_order_release);
}

void CompletionSource::Finish() {
  std::vector<std::function<void()>>& callbacks = state_->running;
  {
    std::lock_guard lock(state_->mu);
    if (state_->finishing) return;
    for (size_t i = 0; i < state_->results.size(); ++i) {
      if (!state_->set[i]) state_->results[i] = Status::Internal("no result was set");
    }
    state_->finishing = true;
    state_->finisher.store(std::this_thread::get_id(), std::memory_order_release);
  }
  // Callbacks run before waiters wake, so whatever they record (counters,
  // freed slots) is visible to a caller as soon as its Wait() returns. They
  // run in the order registered, one registered while they run (from any
  // thread) after them, here; only once the queue is empty is the
  // completion done, and a callback registered after that runs at once.
  for (;;) {
    {
      std::lock_guard lock(state_->mu);
      callbacks.swap(state_->callbacks);
      if (callbacks.empty()) {
        state_->done.store(true, std::memory_order_release);
        break;
      }
    }
    for (auto& fn : callbacks) {
      // A callback that throws must not leave the waiters asleep forever,
      // nor take down the thread that finished the work: its exception is
      // dropped.
      try {
        fn();
      } catch (...) {
      }
    }
    callbacks.clear();
  }
  state_->cv.notify_all();
}

Completion CompletionSource::Done(size_t items, const Status& status) {
  CompletionSource src(items);
  if (items == 0) src.state_->refused = status;
  src.SetAll(status);
  src.Finish();
  return src.completion();
}

}  // namespace kvtier
