#include "gpu/cuda/event_poller.h"

#include <chrono>
#include <string>
#include <utility>

namespace kvtier::cuda {
namespace {

// Between two passes that found nothing complete. A copy of one block takes
// tens of microseconds at least, so a shorter interval would only burn CPU.
constexpr auto kPollInterval = std::chrono::microseconds(20);

}  // namespace

EventPoller::EventPoller(int device) : device_(device), thread_([this] { Loop(); }) {}

EventPoller::~EventPoller() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EventPoller::Add(std::unique_ptr<PendingCopy> copy) {
  {
    std::lock_guard lock(mu_);
    incoming_.push_back({std::move(copy), 0});
  }
  cv_.notify_one();
}

bool EventPoller::Advance(Tracked& t) {
  PendingCopy& c = *t.copy;
  while (t.next < c.events.size()) {
    const cudaError_t err = cudaEventQuery(c.events[t.next].get());
    if (err == cudaErrorNotReady) return false;
    if (err != cudaSuccess) {
      // The stream is broken; later events will never be meaningful.
      Status st =
          FromCuda(err, c.per_layer ? "cuda copy engine: load of layer " + std::to_string(t.next)
                                    : std::string("cuda copy engine: save"));
      if (c.done) c.done(std::move(st));
      return true;
    }
    if (c.per_layer && c.on_layer) c.on_layer(static_cast<uint32_t>(t.next));
    ++t.next;
  }
  c.lease.reset();
  if (c.done) c.done(Status::Ok());
  return true;
}

// Only this thread touches `active`; Add() hands copies over through
// incoming_. On stop, copies already added are still driven to completion so
// that no callback is lost and no host buffer is released while in use.
void EventPoller::Loop() {
  cudaSetDevice(device_);
  std::deque<Tracked> active;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (active.empty()) cv_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
      while (!incoming_.empty()) {
        active.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      if (stop_ && active.empty()) return;
    }
    bool progressed = false;
    for (auto it = active.begin(); it != active.end();) {
      const size_t before = it->next;
      if (Advance(*it)) {
        it = active.erase(it);
        progressed = true;
      } else {
        progressed |= it->next != before;
        ++it;
      }
    }
    if (!progressed && !active.empty()) std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace kvtier::cuda
