#include "gpu/cuda/event_poller.h"

#include <chrono>
#include <list>
#include <string>
#include <utility>

#include "gpu/layer_report.h"

namespace kvtier::cuda {
namespace {

// Between two passes that found nothing complete. A copy of one block takes
// tens of microseconds at least, so a shorter interval would only burn CPU.
constexpr auto kPollInterval = std::chrono::microseconds(20);

}  // namespace

std::string CopyName(bool save, uint32_t engine_block, std::optional<uint32_t> layer) {
  std::string name = std::string("cuda copy engine: ") + (save ? "save" : "load") +
                     " of engine block " + std::to_string(engine_block);
  if (layer) name += " layer " + std::to_string(*layer);
  return name;
}

EventPoller::EventPoller(int device, DeviceHealth* health)
    : device_(device), health_(health), thread_([this] { Loop(); }) {}

EventPoller::~EventPoller() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool EventPoller::Add(std::unique_ptr<PendingCopy>& copy) noexcept {
  try {
    std::lock_guard lock(mu_);
    incoming_.emplace_back();  // the copy moves only once there is room for it
    incoming_.back().copy = std::move(copy);
  } catch (...) {
    return false;
  }
  cv_.notify_one();
  return true;
}

// No copy of the batch is complete before its last event, so an event that
// fails takes every copy still in flight with it. The layer is named once,
// with the copy, as when issuing it fails.
void EventPoller::Fail(PendingCopy& c, size_t event, const Status& why) {
  std::optional<uint32_t> layer;
  if (c.per_layer) layer = static_cast<uint32_t>(event);
  for (size_t i = 0; i < c.results.size(); ++i) {
    if (!c.results[i].ok()) continue;
    // Out of memory for the copy's name: the failure alone.
    c.results[i] = DescribedStatus(why.code(), why.message(), [&] {
      return why.WithContext(CopyName(!c.per_layer, c.blocks[i], layer));
    });
  }
  c.lease.reset();
  internal::ReportDone(c.done, std::move(c.results));
}

// Events of one stream complete in order, and after an error that breaks the
// context every query fails at once; a failure that leaves the context usable
// (none is known to reach an event) still lets the later copies run to their
// end before `done` hands the buffers back.
bool EventPoller::Drained(Tracked& t) {
  PendingCopy& c = *t.copy;
  while (t.next < c.events.size()) {
    if (cudaEventQuery(c.events[t.next].get()) == cudaErrorNotReady) return false;
    ++t.next;
  }
  return true;
}

bool EventPoller::Advance(Tracked& t) {
  PendingCopy& c = *t.copy;
  while (t.failure.ok() && t.next < c.events.size()) {
    const cudaError_t err = cudaEventQuery(c.events[t.next].get());
    if (err == cudaErrorNotReady) return false;
    const size_t event = t.next++;
    if (err != cudaSuccess) {
      t.failure = FromCuda(err, "completion event");
      if (IsStickyError(err)) health_->MarkLost(t.failure);
      t.failed_event = event;
    } else if (c.per_layer && c.on_layer) {
      // As on the host engine: the caller's per-layer work for these blocks
      // is broken, so no later layer is reported and the copies fail.
      Status reported = internal::ReportLayer(c.on_layer, static_cast<uint32_t>(event));
      if (!reported.ok()) {
        t.failure = std::move(reported);
        t.failed_event = event;
      }
    }
  }
  if (!t.failure.ok()) {
    if (!Drained(t)) return false;
    Fail(c, t.failed_event, t.failure);
    return true;
  }
  c.lease.reset();
  internal::ReportDone(c.done, std::move(c.results));
  return true;
}

// Only this thread touches `active`; Add() hands copies over through
// incoming_. On stop, copies already added are still driven to completion so
// that no callback is lost and no host buffer is released while in use.
void EventPoller::Loop() {
  cudaSetDevice(device_);
  std::list<Tracked> active;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (active.empty()) cv_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
      active.splice(active.end(), incoming_);
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
