// EventPoller: the CUDA copy engine's completion thread. It polls the events
// of in-flight copies with cudaEventQuery and runs their callbacks, in layer
// order, on its own thread. Polling (rather than cudaLaunchHostFunc) keeps
// callbacks off the driver's internal thread, where calling CUDA is not
// allowed and a slow callback would stall every stream.
#pragma once

#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda/cuda_util.h"
#include "kvtier/copy_engine.h"

namespace kvtier::cuda {

// How results name one copy: "cuda copy engine: save of engine block 7", and
// for a load's layer "cuda copy engine: load of engine block 7 layer 3". The
// one place the engine and the poller build it, so both read alike.
std::string CopyName(bool save, uint32_t engine_block, std::optional<uint32_t> layer);

// One submitted Gather or Scatter.
struct PendingCopy {
  // Recorded on the copy stream after each layer (Scatter) or once after
  // everything (Gather). The last one completing means the whole batch did.
  std::vector<Event> events;
  bool per_layer = false;       // events[i] reports layer i through on_layer
  LayerDone on_layer;           // may be empty
  CopyDone done;                // may be empty
  std::shared_ptr<void> lease;  // what the copy reads (descriptor table); dropped at the end
  // One per copy: failures found while issuing; the copies still OK are in
  // flight and end OK, or with the error of an event that fails.
  std::vector<Status> results;
  std::vector<uint32_t> blocks;  // engine block of each copy, for messages
};

class EventPoller {
 public:
  // Starts the thread, which sets `device` as its current device. A sticky
  // error seen on an event is reported to `health`, which must outlive this.
  EventPoller(int device, DeviceHealth* health);
  // Waits until every added copy has completed and its callbacks have run.
  ~EventPoller();
  EventPoller(const EventPoller&) = delete;
  EventPoller& operator=(const EventPoller&) = delete;

  // Hands `copy` to the thread. False, leaving `copy` with the caller, when
  // there is no memory to track it: the caller must then wait out its copies
  // itself before running `done`.
  // REQUIRES: copy->events is not empty and every event has been recorded.
  // Thread-safe.
  bool Add(std::unique_ptr<PendingCopy>& copy) noexcept;

 private:
  struct Tracked {
    std::unique_ptr<PendingCopy> copy;
    size_t next = 0;  // first event not yet seen complete (or failed)
    // The first event that failed, or whose on_layer threw, and how; then
    // the later events are only waited out, so that `done` never runs while
    // a copy may still write.
    Status failure;
    size_t failed_event = 0;
  };

  void Loop();
  // Advances one copy as far as its events allow; true when it is finished.
  // Runs callbacks, so it is called without mu_.
  bool Advance(Tracked& t);

  // Fails the copies of `c` still in flight with `why` and runs `done`.
  static void Fail(PendingCopy& c, size_t event, const Status& why);
  // After a failed event: true once no later event is still pending.
  static bool Drained(Tracked& t);

  const int device_;
  DeviceHealth* const health_;
  std::mutex mu_;
  std::condition_variable cv_;
  // A list: the poller thread takes it whole (splice), allocating nothing.
  std::list<Tracked> incoming_;   // guarded by mu_
  bool stop_ = false;             // guarded by mu_
  std::thread thread_;
};

}  // namespace kvtier::cuda
