// The CUDA copy engine. A Gather or Scatter call checks each copy, expands
// the good ones into contiguous pieces with gpu/layout_runs.h (the same runs
// the host stand-in memcpys), and enqueues them on a dedicated low-priority
// stream behind an event recorded on the engine's compute stream. Pieces go
// either to the DMA engines (cudaMemcpyBatchAsync, one call per layer or
// batch) or to the copy kernel through a descriptor table in mapped pinned
// memory. Completion is an event per layer (loads) or per batch (saves),
// observed by the EventPoller thread; the calling thread never waits for the
// device, except to drain its own stream when a batch is abandoned halfway.
//
// Errors are per copy: a bad copy fails before issue; a failed CUDA call is
// retried block by block so that only the blocks whose own call fails are
// dropped; a sticky error (the context is lost) fails every copy still in
// flight and every later call.
//
// The plan of pieces is built in copy_plan.cc, DMA calls are made in
// dma_issue.cc and the checks at creation live in engine_checks.cc; this
// file issues the plan.

#include "gpu/cuda/cuda_copy_engine.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda/copy_kernel.h"
#include "gpu/cuda/copy_plan.h"
#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/dma_issue.h"
#include "gpu/cuda/engine_checks.h"
#include "gpu/cuda/event_poller.h"
#include "gpu/cuda/pinned_pool.h"
#include "gpu/layer_report.h"
#include "gpu/layout_runs.h"

namespace kvtier::cuda {
namespace {

// One direction (save or load): its stream, and an event reused to order
// the stream after the compute stream. `mu` keeps one call's record, wait
// and copies together.
struct Lane {
  Stream stream;
  Event ready;
  std::mutex mu;
};

class CudaCopyEngine final : public CopyEngine {
 public:
  CudaCopyEngine(const CudaCopyEngineOptions& options, Stream save, Stream load, Event save_ready,
                 Event load_ready, IssueFaultHook hook, std::shared_ptr<LogSink> log,
                 PinnedPool::Allocator tables)
      : options_(options),
        compute_(static_cast<cudaStream_t>(options.compute_stream)),
        layer_run_bytes_(LayerRunBytes(options.layout)),
        hook_(std::move(hook)),
        log_(std::move(log)),
        tables_(tables ? std::move(tables) : PinnedPool::MappedPinnedAllocator()),
        poller_(options.device, &health_) {
    save_.stream = std::move(save);
    save_.ready = std::move(save_ready);
    load_.stream = std::move(load);
    load_.ready = std::move(load_ready);
  }
  // The members go (the poller's thread, the streams, events and pinned
  // tables) with the engine's device current, on whatever thread destroys
  // the engine: without it their CUDA calls would create a context on that
  // thread's default device.
  ~CudaCopyEngine() override { teardown_device_.emplace(options_.device); }

  const KvLayout& layout() const override { return options_.layout; }

  void Gather(std::span<const BlockCopy> copies, CopyDone done) override {
    Submit(copies, /*gather=*/true, nullptr, std::move(done));
  }

  void Scatter(std::span<const BlockCopy> copies, LayerDone on_layer, CopyDone done) override {
    Submit(copies, /*gather=*/false, std::move(on_layer), std::move(done));
  }

  Result<std::unique_ptr<HostMemoryPin>> PinHostMemory(std::span<std::byte> memory) override {
    KVTIER_ASSIGN_OR_RETURN(auto pin, RegisteredHostMemory::Register(options_.device, memory));
    return std::unique_ptr<HostMemoryPin>(std::move(pin));
  }

 private:
  void Submit(std::span<const BlockCopy> copies, bool gather, LayerDone on_layer, CopyDone done);
  // Builds the plan and issues it; false when nothing went to the poller
  // (the batch is then final in `batch.results`).
  bool Start(Batch& batch, cuda::PendingCopy* pending);
  Status Issue(Lane& lane, Batch& batch, cuda::PendingCopy* pending);
  // How many leading layers of an abandoned load landed (0 for a save or
  // without on_layer).
  static size_t LandedLayers(const PendingCopy& pending);
  // Logs, once per engine, that copies of unregistered host memory run slowly.
  void WarnPageable();
  Status IssueSegment(Lane& lane, Batch& batch, size_t s, const Table& table);
  // Records the event after a segment and hands it to `pending`.
  Status RecordEvent(Lane& lane, cuda::PendingCopy* pending);
  Status AskHook(Batch& batch, size_t s);
  Status IssueDmaSegment(Lane& lane, Batch& batch, size_t s);
  Status IssueKernelSegment(Lane& lane, Batch& batch, size_t s, const Table& table);
  // Status of a failed call; a sticky one also marks the device lost.
  Status Broken(const CallError& e) {
    Status st = e.ToStatus();
    if (IsStickyError(e.err)) health_.MarkLost(st);
    return st;
  }
  // Waits out what `stream` holds. Its error is the batch's own, already
  // failed; but a sticky one first seen here must still mark the device
  // lost, or later batches would be issued to a dead context.
  void Drain(cudaStream_t stream) {
    if (const cudaError_t err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      (void)Broken({err, "cudaStreamSynchronize"});
    }
  }

  // First, so it is destroyed last: set by the destructor, it restores the
  // thread's own context once every other member is gone.
  std::optional<ScopedDevice> teardown_device_;
  const CudaCopyEngineOptions options_;
  const cudaStream_t compute_;
  const uint64_t layer_run_bytes_;
  const IssueFaultHook hook_;  // empty outside tests
  const std::shared_ptr<LogSink> log_;
  std::atomic<bool> warned_pageable_{false};
  std::atomic<bool> warned_no_table_{false};  // a batch without a kernel table went by DMA
  DeviceHealth health_;
  // Teardown order: the poller drains (releasing descriptor tables) before
  // the pool and the streams go.
  PinnedPool tables_;
  Lane save_;
  Lane load_;
  EventPoller poller_;
};

void CudaCopyEngine::Submit(std::span<const BlockCopy> copies, bool gather, LayerDone on_layer,
                            CopyDone done) {
  Batch batch;
  batch.copies = copies;
  batch.gather = gather;
  batch.results = internal::CheckEachBlockCopy(layout(), copies, /*unique_blocks=*/!gather,
                                               /*disjoint_hosts=*/gather);
  const Status lost = health_.Lost();
  if (!lost.ok()) batch.FailLive(kWholeBatch, lost);
  if (!batch.AnyLive()) {
    // Nothing to move: every layer of every good copy (none) has landed. On
    // a lost device no layer is reported, as after any error that breaks it.
    if (!gather && on_layer && lost.ok()) {
      for (uint32_t l = 0; l < layout().num_layers; ++l) {
        if (!internal::ReportLayer(on_layer, l).ok()) break;
      }
    }
    internal::ReportDone(done, std::move(batch.results));
    return;
  }
  std::vector<Status> results;  // final here when nothing went to the poller
  LayerDone report_landed;      // a load abandoned while issuing: its landed layers
  size_t landed = 0;
  {
    // Every CUDA call of the batch runs on the engine's device; not `done`.
    ScopedDevice device(options_.device);
    auto pending = std::make_unique<PendingCopy>();
    if (device.status() != cudaSuccess) {
      batch.FailLive(kWholeBatch, Broken({device.status(), "cudaSetDevice"}));
    } else {
      pending->per_layer = !gather;
      pending->on_layer = std::move(on_layer);
      // Allocated before anything is issued: a throw after that would leave
      // copies in flight with nobody to wait for them.
      pending->blocks.reserve(copies.size());
      for (const BlockCopy& c : copies) pending->blocks.push_back(c.engine_block);
      const bool started = Start(batch, pending.get());
      if (!started && batch.landed_layers > 0) {
        report_landed = std::move(pending->on_layer);
        landed = batch.landed_layers;
      }
      if (started) {
        pending->results = std::move(batch.results);
        pending->done = std::move(done);
        if (poller_.Add(pending)) return;
        // Nothing will watch these copies: wait them out here, so that
        // `done` never runs while one may still touch a buffer.
        Drain((gather ? save_ : load_).stream.get());
        const Status st = Status::ResourceExhausted("out of memory to track the copy");
        for (size_t i = 0; i < pending->results.size(); ++i) {
          if (!pending->results[i].ok()) continue;
          pending->results[i] = st.WithContext(CopyName(gather, pending->blocks[i], std::nullopt));
        }
        batch.results = std::move(pending->results);
        done = std::move(pending->done);
      }
    }
    results = std::move(batch.results);
  }
  // Here, with no lock held and the caller's device current again: an
  // on_layer may call the engine.
  for (size_t l = 0; l < landed; ++l) {
    if (!internal::ReportLayer(report_landed, static_cast<uint32_t>(l)).ok()) break;
  }
  internal::ReportDone(done, std::move(results));
}

bool CudaCopyEngine::Start(Batch& batch, PendingCopy* pending) {
  Status st;
  try {
    MakePlan(options_, layer_run_bytes_, batch, /*allow_kernel=*/true);
    if (!batch.plan.pinned) WarnPageable();
    st = Issue(batch.gather ? save_ : load_, batch, pending);
  } catch (const std::bad_alloc&) {
    st = Status::ResourceExhausted("out of memory for the copy list");
  }
  if (st.ok()) return true;
  // Issue drained the stream: nothing touches the buffers any more.
  batch.FailLive(kWholeBatch, st);
  return false;
}

// Pageable host memory cannot be read by DMA asynchronously: the driver
// stages each run through a bounce buffer and the call returns only when it
// is done, so the runtime's worker thread copies row by row.
void CudaCopyEngine::WarnPageable() {
  if (warned_pageable_.exchange(true, std::memory_order_relaxed)) return;
  log_->Log(LogLevel::kError,
            "cuda copy engine: host buffers are not registered with CUDA (PinHostMemory failed "
            "or was not called): every copy runs as synchronous pageable cudaMemcpyAsync calls, "
            "one per contiguous run (up to " +
                std::to_string(internal::MaxBlockRuns(options_.layout)) +
                " per block for this layout), blocking the calling thread and never using the "
                "copy kernel; register the host memory (cudaHostRegister) to copy asynchronously");
}

// A non-OK return abandons the batch: the stream has been drained (not the
// device) so that no copy still touches the caller's buffers, and the caller
// fails every copy still live.
Status CudaCopyEngine::Issue(Lane& lane, Batch& batch, PendingCopy* pending) {
  Table table;
  if (batch.plan.kernel) {
    Result<PinnedPool::Lease> lease = tables_.Acquire(batch.plan.pieces.size() * sizeof(CopyPiece));
    if (lease.ok()) {
      table.host = static_cast<CopyPiece*>(lease->host());
      table.device = static_cast<const CopyPiece*>(lease->device());
      std::copy(batch.plan.pieces.begin(), batch.plan.pieces.end(), table.host);
      pending->lease = std::make_shared<PinnedPool::Lease>(std::move(lease).value());
    } else {
      if (!warned_no_table_.exchange(true, std::memory_order_relaxed)) {
        log_->Log(LogLevel::kWarning,
                  "cuda copy engine: no pinned descriptor table for the copy kernel (" +
                      lease.status().ToString() + "); such batches go by DMA");
      }
      batch.plan = Plan{};
      MakePlan(options_, layer_run_bytes_, batch, /*allow_kernel=*/false);
    }
  }
  std::lock_guard lock(lane.mu);
  if (cudaError_t err = cudaEventRecord(lane.ready.get(), compute_); err != cudaSuccess) {
    return Broken({err, "cudaEventRecord on the compute stream"});
  }
  if (cudaError_t err = cudaStreamWaitEvent(lane.stream.get(), lane.ready.get(), 0);
      err != cudaSuccess) {
    return Broken({err, "cudaStreamWaitEvent"});
  }
  pending->events.reserve(batch.plan.segments);
  for (size_t s = 0; s < batch.plan.segments; ++s) {
    Status st;
    try {
      st = IssueSegment(lane, batch, s, table);
      if (st.ok()) st = RecordEvent(lane, pending);
    } catch (const std::bad_alloc&) {
      // Earlier segments are queued: this batch is abandoned like any other.
      st = Status::ResourceExhausted("out of memory while issuing copies");
    } catch (const std::exception& e) {
      // With what it said, if there is memory for it: the stream is drained below.
      st = DescribedStatus(StatusCode::kInternal, "issuing copies threw", [&] {
        return Status::Internal(std::string("issuing copies threw: ") + e.what());
      });
    }
    if (!st.ok()) {
      Drain(lane.stream.get());
      batch.landed_layers = LandedLayers(*pending);
      // Segment s did not land for any copy: none still live is complete.
      batch.FailLive(s, st);
      return st;
    }
  }
  return Status::Ok();
}

// As the host engine does: the layers that landed before the batch was
// abandoned are reported, in order, up to the first whose event did not
// complete (after a sticky error, none).
size_t CudaCopyEngine::LandedLayers(const PendingCopy& pending) {
  if (!pending.per_layer || !pending.on_layer) return 0;
  for (size_t l = 0; l < pending.events.size(); ++l) {
    if (cudaEventQuery(pending.events[l].get()) != cudaSuccess) {
      cudaGetLastError();
      return l;
    }
  }
  return pending.events.size();
}

Status CudaCopyEngine::RecordEvent(Lane& lane, PendingCopy* pending) {
  KVTIER_ASSIGN_OR_RETURN(Event event, Event::Create());
  const cudaError_t err = cudaEventRecord(event.get(), lane.stream.get());
  if (err != cudaSuccess) return Broken({err, "cudaEventRecord"});
  pending->events.push_back(std::move(event));  // reserved: cannot throw
  return Status::Ok();
}

Status CudaCopyEngine::IssueSegment(Lane& lane, Batch& batch, size_t s, const Table& table) {
  KVTIER_RETURN_IF_ERROR(AskHook(batch, s));
  if (!batch.AnyLive()) return Status::Ok();
  return batch.plan.kernel ? IssueKernelSegment(lane, batch, s, table)
                           : IssueDmaSegment(lane, batch, s);
}

// The hook's error replaces the block's own CUDA call, so it is handled as
// that call failing: the block fails, or with a sticky error the batch does.
Status CudaCopyEngine::AskHook(Batch& batch, size_t s) {
  if (!hook_) return Status::Ok();
  const uint32_t first = batch.gather ? 0 : static_cast<uint32_t>(s);
  const uint32_t last = batch.gather ? layout().num_layers : first + 1;
  for (size_t i = 0; i < batch.copies.size(); ++i) {
    for (uint32_t layer = first; layer < last && batch.results[i].ok(); ++layer) {
      const cudaError_t err = hook_(batch.copies[i].engine_block, layer);
      if (err == cudaSuccess) continue;
      const CallError e{err, "fault hook"};
      if (IsStickyError(err)) return Broken(e);
      batch.FailCopy(i, s, e.ToStatus());
    }
  }
  return Status::Ok();
}

// One call for the pieces of every live copy. If it fails without breaking
// the device, each live copy is issued alone and only those whose own call
// fails are dropped; re-issuing pieces that may have been queued already is
// harmless (same bytes to the same place).
Status CudaCopyEngine::IssueDmaSegment(Lane& lane, Batch& batch, size_t s) {
  const Plan& plan = batch.plan;
  std::vector<CopyPiece> live;
  for (size_t i = 0; i < plan.copies; ++i) {
    if (!batch.results[i].ok()) continue;
    const std::span<const CopyPiece> mine = plan.Of(s, i);
    live.insert(live.end(), mine.begin(), mine.end());
  }
  CallError e = IssueDma(live, plan.pinned, lane.stream.get());
  if (e.ok()) return Status::Ok();
  if (IsStickyError(e.err)) return Broken(e);
  cudaGetLastError();  // not sticky: clear it before the retries
  for (size_t i = 0; i < plan.copies; ++i) {
    if (!batch.results[i].ok()) continue;
    e = IssueDma(plan.Of(s, i), plan.pinned, lane.stream.get());
    if (e.ok()) continue;
    if (IsStickyError(e.err)) return Broken(e);
    cudaGetLastError();
    batch.FailCopy(i, s, e.ToStatus());
  }
  return Status::Ok();
}

// The kernel moves the whole segment in one launch: pieces of copies that
// failed are neutralised in the table (bytes = 0) before it runs, and a
// launch failure fails every copy of the launch.
Status CudaCopyEngine::IssueKernelSegment(Lane& lane, Batch& batch, size_t s, const Table& table) {
  const Plan& plan = batch.plan;
  for (size_t i = 0; i < plan.copies; ++i) {
    if (batch.results[i].ok()) continue;
    for (size_t k = plan.Begin(s, i); k < plan.Begin(s, i + 1); ++k) table.host[k].bytes = 0;
  }
  const size_t begin = plan.Begin(s, 0), end = plan.Begin(s + 1, 0);
  const cudaError_t err =
      LaunchCopyPieces(table.device + begin, static_cast<uint32_t>(end - begin), lane.stream.get());
  if (err == cudaSuccess) return Status::Ok();
  const CallError e{err, "copy kernel launch"};
  if (IsStickyError(err)) return Broken(e);
  cudaGetLastError();
  batch.FailLive(s, e.ToStatus());
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CopyEngine>> TEST_CreateCudaCopyEngine(CudaCopyEngineOptions options,
                                                              IssueFaultHook hook,
                                                              std::shared_ptr<LogSink> log,
                                                              PinnedPool::Allocator tables) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  if (log == nullptr) log = StderrLogSink(LogLevel::kWarning);
  int count = 0;
  KVTIER_RETURN_IF_ERROR(
      FromCuda(cudaGetDeviceCount(&count), "cuda copy engine: cudaGetDeviceCount"));
  if (options.device >= count) {
    return Status::NotSupported("cuda copy engine: device " + std::to_string(options.device) +
                                " requested but " + std::to_string(count) + " present");
  }
  ScopedDevice device(options.device);
  KVTIER_RETURN_IF_ERROR(FromCuda(device.status(), "cuda copy engine: cudaSetDevice"));
  KVTIER_RETURN_IF_ERROR(CheckTensors(options));
  KVTIER_RETURN_IF_ERROR(CheckComputeStream(options));
  if (options.path != CudaCopyPath::kDma) {
    KVTIER_ASSIGN_OR_RETURN(options.path, ChooseCopyPath(options.path, ProbeCopyKernel(),
                                                         DeviceName(options.device), *log));
  }
  KVTIER_ASSIGN_OR_RETURN(Stream save, Stream::CreateLowPriority());
  KVTIER_ASSIGN_OR_RETURN(Stream load, Stream::CreateLowPriority());
  KVTIER_ASSIGN_OR_RETURN(Event save_ready, Event::Create());
  KVTIER_ASSIGN_OR_RETURN(Event load_ready, Event::Create());
  return std::unique_ptr<CopyEngine>(new CudaCopyEngine(
      options, std::move(save), std::move(load), std::move(save_ready), std::move(load_ready),
      std::move(hook), std::move(log), std::move(tables)));
}

}  // namespace kvtier::cuda

namespace kvtier {

Result<std::unique_ptr<CopyEngine>> CreateCudaCopyEngine(const CudaCopyEngineOptions& options) {
  return cuda::TEST_CreateCudaCopyEngine(options, nullptr, nullptr, nullptr);
}

}  // namespace kvtier
