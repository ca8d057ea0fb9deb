// The CUDA copy engine. A Gather or Scatter call checks its copies, expands
// them into contiguous pieces with gpu/layout_runs.h (the same runs the host
// stand-in memcpys), and enqueues them on a dedicated low-priority stream
// behind an event recorded on the engine's compute stream. Pieces go either
// to the DMA engines (cudaMemcpyBatchAsync, one call per layer or batch) or
// to the copy kernel through a descriptor table in mapped pinned memory.
// Completion is an event per layer (loads) or per batch (saves), observed by
// the EventPoller thread; the calling thread never waits for the device.

#include <algorithm>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda/copy_kernel.h"
#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/event_poller.h"
#include "gpu/cuda/pinned_pool.h"
#include "gpu/layout_runs.h"

namespace kvtier {
namespace {

using cuda::CopyPiece;
using cuda::FromCuda;

// The pieces of one call, split into segments that each end with an event
// (one per layer for Scatter, one for Gather).
struct Plan {
  std::vector<CopyPiece> pieces;
  std::vector<size_t> segment_end;  // pieces[segment_end[i-1], segment_end[i]) is segment i
  bool kernel = false;              // copy kernel rather than DMA
  bool pinned = false;              // every host buffer is page-locked
};

// One direction (save or load): its stream, and an event reused to order
// the stream after the compute stream. `mu` keeps one call's record, wait
// and copies together.
struct Lane {
  cuda::Stream stream;
  cuda::Event ready;
  std::mutex mu;
};

// Typical contiguous run of one block's layer: what decides between DMA and
// the kernel.
uint64_t LayerRunBytes(const KvLayout& layout) {
  std::vector<internal::CopyRun> runs;
  internal::AppendLayerRuns(layout, 0, 0, &runs);
  return layout.Planes() * layout.PageBytes() / std::max<size_t>(runs.size(), 1);
}

Status IssueDma(std::span<const CopyPiece> pieces, bool pinned, cudaStream_t stream) {
  if (pieces.empty()) return Status::Ok();
  if (pinned && pieces.size() > 1) {
    // One driver call for the whole segment; it needs page-locked host memory
    // to stay asynchronous.
    std::vector<void*> dsts(pieces.size());
    std::vector<const void*> srcs(pieces.size());
    std::vector<size_t> sizes(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      dsts[i] = reinterpret_cast<void*>(pieces[i].dst);
      srcs[i] = reinterpret_cast<const void*>(pieces[i].src);
      sizes[i] = pieces[i].bytes;
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t attr_index = 0;
    const cudaError_t err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(),
                                                 pieces.size(), &attr, &attr_index, 1, stream);
    if (err == cudaSuccess) return Status::Ok();
    if (err != cudaErrorNotSupported && err != cudaErrorCallRequiresNewerDriver) {
      return FromCuda(err, "cudaMemcpyBatchAsync of " + std::to_string(pieces.size()) + " pieces");
    }
    cudaGetLastError();  // an older driver: fall back to one call per piece
  }
  for (const CopyPiece& p : pieces) {
    KVTIER_RETURN_IF_ERROR(FromCuda(
        cudaMemcpyAsync(reinterpret_cast<void*>(p.dst), reinterpret_cast<const void*>(p.src),
                        p.bytes, cudaMemcpyDefault, stream),
        "cudaMemcpyAsync"));
  }
  return Status::Ok();
}

class CudaCopyEngine final : public CopyEngine {
 public:
  CudaCopyEngine(const CudaCopyEngineOptions& options, cuda::Stream save, cuda::Stream load,
                 cuda::Event save_ready, cuda::Event load_ready)
      : options_(options),
        compute_(static_cast<cudaStream_t>(options.compute_stream)),
        layer_run_bytes_(LayerRunBytes(options.layout)),
        poller_(options.device) {
    save_.stream = std::move(save);
    save_.ready = std::move(save_ready);
    load_.stream = std::move(load);
    load_.ready = std::move(load_ready);
  }

  const KvLayout& layout() const override { return options_.layout; }

  void Gather(std::span<const BlockCopy> copies, CopyDone done) override {
    Status st = internal::CheckBlockCopies(layout(), copies, /*unique_blocks=*/false);
    if (!st.ok() || copies.empty()) {
      if (done) done(std::move(st));
      return;
    }
    Submit(copies, /*gather=*/true, nullptr, std::move(done));
  }

  void Scatter(std::span<const BlockCopy> copies, LayerDone on_layer, CopyDone done) override {
    Status st = internal::CheckBlockCopies(layout(), copies, /*unique_blocks=*/true);
    if (st.ok() && copies.empty()) {
      for (uint32_t l = 0; l < layout().num_layers; ++l) {
        if (on_layer) on_layer(l);
      }
    }
    if (!st.ok() || copies.empty()) {
      if (done) done(std::move(st));
      return;
    }
    Submit(copies, /*gather=*/false, std::move(on_layer), std::move(done));
  }

  Result<std::unique_ptr<HostMemoryPin>> PinHostMemory(std::span<std::byte> memory) override {
    KVTIER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(options_.device), "cudaSetDevice"));
    KVTIER_ASSIGN_OR_RETURN(auto pin, cuda::RegisteredHostMemory::Register(memory));
    return std::unique_ptr<HostMemoryPin>(std::move(pin));
  }

 private:
  void Submit(std::span<const BlockCopy> copies, bool gather, LayerDone on_layer, CopyDone done) {
    auto pending = std::make_unique<cuda::PendingCopy>();
    pending->per_layer = !gather;
    pending->on_layer = std::move(on_layer);
    Status st;
    try {
      Plan plan = MakePlan(copies, gather);
      st = Issue(gather ? save_ : load_, plan, pending.get());
    } catch (const std::bad_alloc&) {
      st = Status::ResourceExhausted("cuda copy engine: out of memory for the copy list");
    }
    if (!st.ok()) {
      if (done) done(st.WithContext(gather ? "save" : "load"));
      return;
    }
    pending->done = std::move(done);
    poller_.Add(std::move(pending));
  }

  Plan MakePlan(std::span<const BlockCopy> copies, bool gather) const;
  Status Issue(Lane& lane, const Plan& plan, cuda::PendingCopy* pending);
  Status IssueSegments(Lane& lane, const Plan& plan, cuda::PendingCopy* pending);

  const CudaCopyEngineOptions options_;
  const cudaStream_t compute_;
  const uint64_t layer_run_bytes_;
  // Teardown order: the poller drains (releasing descriptor tables) before
  // the pool and the streams go.
  cuda::PinnedPool tables_;
  Lane save_;
  Lane load_;
  cuda::EventPoller poller_;
};

// Gather: every run of each block, one segment. Scatter: layer-major, one
// segment per layer, so layer l's event covers layer l of every block.
Plan CudaCopyEngine::MakePlan(std::span<const BlockCopy> copies, bool gather) const {
  Plan plan;
  std::vector<uint64_t> host(copies.size());
  plan.pinned = true;
  for (size_t i = 0; i < copies.size(); ++i) {
    void* dev = cuda::MappedDevicePointer(copies[i].host.data());
    plan.pinned = plan.pinned && dev != nullptr;
    host[i] = reinterpret_cast<uint64_t>(dev);
  }
  const bool want_kernel =
      options_.path == CudaCopyPath::kKernel ||
      (options_.path == CudaCopyPath::kAuto && layer_run_bytes_ < options_.kernel_max_run_bytes);
  plan.kernel = want_kernel && plan.pinned;
  if (!plan.kernel) {
    for (size_t i = 0; i < copies.size(); ++i) {
      host[i] = reinterpret_cast<uint64_t>(copies[i].host.data());
    }
  }
  std::vector<internal::CopyRun> runs;
  auto emit = [&](size_t i) {
    for (const internal::CopyRun& r : runs) {
      const uint64_t engine =
          reinterpret_cast<uint64_t>(options_.tensors[r.tensor]) + r.engine_offset;
      const uint64_t h = host[i] + r.host_offset;
      plan.pieces.push_back(gather ? CopyPiece{h, engine, r.bytes} : CopyPiece{engine, h, r.bytes});
    }
    runs.clear();
  };
  if (gather) {
    for (size_t i = 0; i < copies.size(); ++i) {
      internal::AppendBlockRuns(layout(), copies[i].engine_block, &runs);
      emit(i);
    }
    plan.segment_end.push_back(plan.pieces.size());
    return plan;
  }
  for (uint32_t layer = 0; layer < layout().num_layers; ++layer) {
    for (size_t i = 0; i < copies.size(); ++i) {
      internal::AppendLayerRuns(layout(), copies[i].engine_block, layer, &runs);
      emit(i);
    }
    plan.segment_end.push_back(plan.pieces.size());
  }
  return plan;
}

// On a failure after some pieces were enqueued, the stream is drained (not
// the device) so that no copy still touches the caller's buffers when `done`
// reports the error.
Status CudaCopyEngine::Issue(Lane& lane, const Plan& plan, cuda::PendingCopy* pending) {
  KVTIER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(options_.device), "cudaSetDevice"));
  std::lock_guard lock(lane.mu);
  KVTIER_RETURN_IF_ERROR(
      FromCuda(cudaEventRecord(lane.ready.get(), compute_), "cudaEventRecord on compute stream"));
  KVTIER_RETURN_IF_ERROR(
      FromCuda(cudaStreamWaitEvent(lane.stream.get(), lane.ready.get(), 0), "cudaStreamWaitEvent"));
  Status st = IssueSegments(lane, plan, pending);
  if (!st.ok()) cudaStreamSynchronize(lane.stream.get());
  return st;
}

Status CudaCopyEngine::IssueSegments(Lane& lane, const Plan& plan, cuda::PendingCopy* pending) {
  CopyPiece* table = nullptr;
  if (plan.kernel) {
    KVTIER_ASSIGN_OR_RETURN(cuda::PinnedPool::Lease lease,
                            tables_.Acquire(plan.pieces.size() * sizeof(CopyPiece)));
    std::copy(plan.pieces.begin(), plan.pieces.end(), static_cast<CopyPiece*>(lease.host()));
    table = static_cast<CopyPiece*>(lease.device());
    pending->lease = std::make_shared<cuda::PinnedPool::Lease>(std::move(lease));
  }
  size_t begin = 0;
  for (size_t end : plan.segment_end) {
    const std::span<const CopyPiece> segment(plan.pieces.data() + begin, end - begin);
    if (plan.kernel) {
      KVTIER_RETURN_IF_ERROR(
          FromCuda(cuda::LaunchCopyPieces(table + begin, static_cast<uint32_t>(segment.size()),
                                          lane.stream.get()),
                   "copy kernel launch"));
    } else {
      KVTIER_RETURN_IF_ERROR(IssueDma(segment, plan.pinned, lane.stream.get()));
    }
    KVTIER_ASSIGN_OR_RETURN(cuda::Event event, cuda::Event::Create());
    KVTIER_RETURN_IF_ERROR(
        FromCuda(cudaEventRecord(event.get(), lane.stream.get()), "cudaEventRecord"));
    pending->events.push_back(std::move(event));
    begin = end;
  }
  return Status::Ok();
}

Status CheckTensors(const CudaCopyEngineOptions& options) {
  for (size_t i = 0; i < options.tensors.size(); ++i) {
    cudaPointerAttributes attr{};
    Status st =
        FromCuda(cudaPointerGetAttributes(&attr, options.tensors[i]), "cudaPointerGetAttributes");
    if (st.ok() && (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)) {
      st = Status::InvalidArgument("not device memory");
    } else if (st.ok() && attr.device != options.device) {
      st = Status::InvalidArgument("on device " + std::to_string(attr.device) + ", not " +
                                   std::to_string(options.device));
    }
    if (!st.ok()) return st.WithContext("cuda copy engine: tensor " + std::to_string(i));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CopyEngine>> CreateCudaCopyEngine(const CudaCopyEngineOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  int count = 0;
  KVTIER_RETURN_IF_ERROR(
      FromCuda(cudaGetDeviceCount(&count), "cuda copy engine: cudaGetDeviceCount"));
  if (options.device >= count) {
    return Status::NotSupported("cuda copy engine: device " + std::to_string(options.device) +
                                " requested but " + std::to_string(count) + " present");
  }
  KVTIER_RETURN_IF_ERROR(
      FromCuda(cudaSetDevice(options.device), "cuda copy engine: cudaSetDevice"));
  KVTIER_RETURN_IF_ERROR(CheckTensors(options));
  KVTIER_ASSIGN_OR_RETURN(cuda::Stream save, cuda::Stream::CreateLowPriority());
  KVTIER_ASSIGN_OR_RETURN(cuda::Stream load, cuda::Stream::CreateLowPriority());
  KVTIER_ASSIGN_OR_RETURN(cuda::Event save_ready, cuda::Event::Create());
  KVTIER_ASSIGN_OR_RETURN(cuda::Event load_ready, cuda::Event::Create());
  return std::unique_ptr<CopyEngine>(new CudaCopyEngine(
      options, std::move(save), std::move(load), std::move(save_ready), std::move(load_ready)));
}

}  // namespace kvtier
