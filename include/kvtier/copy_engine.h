// CopyEngine: moves blocks between the engine's paged KV cache and host
// blocks. Save gathers pages into contiguous host blocks; load scatters host
// blocks into pages, layer by layer, so the engine can start computing layer i
// while later layers are still in flight.
//
// Two implementations share the offset functions of kv_layout.h: the CUDA
// engine (CreateCudaCopyEngine, when built with CUDA) and the host stand-in
// below, whose "device" is a host-memory pool laid out exactly like the
// engine's cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/kv_layout.h"
#include "kvtier/status.h"

namespace kvtier {

// One block to move. `host` is a canonical host block of layout.BlockBytes().
struct BlockCopy {
  uint32_t engine_block = 0;
  std::span<std::byte> host;
};

// The outcome of one Gather or Scatter: results[i] belongs to copies[i].
using CopyDone = std::function<void(std::vector<Status> results)>;
using LayerDone = std::function<void(uint32_t layer)>;

// Keeps a host memory range registered with a device (page-locked and mapped)
// while it lives; the destructor unregisters it. Destroy it before the memory
// is unmapped.
class KVTIER_EXPORT HostMemoryPin {
 public:
  virtual ~HostMemoryPin() = default;
};

class KVTIER_EXPORT CopyEngine {
 public:
  virtual ~CopyEngine() = default;

  virtual const KvLayout& layout() const = 0;

  // Gather and Scatter report failures through `done`. An engine may throw
  // only before it has issued anything: the runtime then fails every copy
  // of the call, frees their host buffers at once and expects `done` never
  // to run. Once a copy is issued, errors must go through `done`.

  // Copies each engine block into its host buffer and reports one result per
  // copy. Each copy is checked on its own before anything is issued: an
  // engine block out of range, a host buffer of the wrong size or one that
  // overlaps an earlier copy's buffer fails that copy alone with
  // InvalidArgument naming it ("copy <i> (engine block <b>): ..."); the
  // others proceed. A device error on one block's copies fails that block
  // with the device's error text; an error that breaks the device (context
  // lost) fails every block not yet completed. `done` runs exactly once,
  // possibly on another thread, after every issued byte has landed or the
  // device has failed: a host buffer is never written after `done`. The
  // copies span may be released when Gather returns; the host buffers must
  // stay valid until `done` runs.
  virtual void Gather(std::span<const BlockCopy> copies, CopyDone done) = 0;

  // Copies each host buffer into its engine block, with per-copy checks and
  // results as Gather (a second copy to the same engine block fails, the
  // first proceeds). `on_layer(l)` runs, in increasing l, once layer l of
  // every copy that has not failed has landed; after an error that breaks
  // the device the layers that landed before it are still reported, the
  // remaining ones are not. Then `done` runs
  // exactly once. `on_layer` may be empty; it runs on the engine's
  // completion thread or inline within Scatter, and must not block.
  virtual void Scatter(std::span<const BlockCopy> copies, LayerDone on_layer, CopyDone done) = 0;

  // Registers `memory` (the host arena, which every host block lives in) so
  // that copies to and from it run as asynchronous DMA or through mapped
  // pointers. The runtime calls this once after creating its arena and keeps
  // the returned pin until the arena is unmapped. The default (engines with
  // no device) pins nothing and returns null. A failure is not fatal: copies
  // of unregistered memory still work, more slowly.
  virtual Result<std::unique_ptr<HostMemoryPin>> PinHostMemory(std::span<std::byte> /*memory*/) {
    return std::unique_ptr<HostMemoryPin>();
  }
};

// What a test fault hook decides for one (engine block, layer) copy.
struct CopyFault {
  Status status;        // OK: copy normally
  bool sticky = false;  // the device is lost from here on
};
using CopyFaultHook = std::function<CopyFault(uint32_t engine_block, uint32_t layer)>;

// The host stand-in. Its pool is ordinary memory shaped like the engine's KV
// cache, so the runtime's save and load paths run unchanged without a GPU.
class KVTIER_EXPORT HostCopyEngine : public CopyEngine {
 public:
  // Allocates a zeroed pool for `layout`. InvalidArgument for a bad layout,
  // ResourceExhausted when the pool cannot be allocated.
  static Result<std::unique_ptr<HostCopyEngine>> Create(const KvLayout& layout);

  // The engine tensor `index` (a layer, or the one cross-layer tensor); the
  // simulated engine reads and writes its pages through these.
  virtual std::span<std::byte> Tensor(uint32_t index) = 0;

  // Synchronous helpers for a simulated engine: write or read one block in
  // canonical host format. InvalidArgument when out of range or mis-sized.
  virtual Status WriteBlock(uint32_t engine_block, std::span<const std::byte> host) = 0;
  virtual Status ReadBlock(uint32_t engine_block, std::span<std::byte> host) = 0;

  // Test hook: `hook(engine_block, layer)` is asked before each layer of
  // each checked copy is moved (Gather asks for every layer of a block before
  // moving it). A non-OK status fails that copy with it; `sticky` also fails
  // every copy of the batch not yet completed, as a lost device would, and
  // every later copy until the hook is replaced. An empty hook (the default)
  // injects nothing. Not for production use; call it while no copy runs.
  virtual void TEST_SetFaultHook(CopyFaultHook hook) = 0;
};

// How the CUDA engine moves a batch.
enum class CudaCopyPath : uint8_t {
  kAuto,    // kKernel when the layout's runs are below kernel_max_run_bytes
  kDma,     // copy engines: batched cudaMemcpyBatchAsync (or cudaMemcpyAsync)
  kKernel,  // a copy kernel reading/writing mapped pinned host memory
};

struct KVTIER_EXPORT CudaCopyEngineOptions {
  // The engine's cache. Must pass Validate().
  KvLayout layout;
  // Device pointers of the engine tensors, EngineTensorCount(layout) of them
  // (one per layer, or the one cross-layer tensor), each at least
  // EngineTensorBytes(layout) bytes, all on `device`. Not owned.
  std::vector<void*> tensors;
  int device = 0;
  // The engine's compute stream (a cudaStream_t), or null for the legacy
  // default stream. Not cudaStreamPerThread: kvtier records on this stream
  // from its own threads, where that handle names a different stream, so an
  // engine computing on per-thread default streams passes an explicit
  // stream. Every copy starts after the work queued on it before the Gather
  // or Scatter call; kvtier never synchronizes the device.
  void* compute_stream = nullptr;
  CudaCopyPath path = CudaCopyPath::kAuto;
  // kAuto picks the kernel when the layout's typical contiguous run (see
  // gpu/layout_runs.h) is shorter than this: below it, the fixed cost of one
  // DMA descriptor dominates (vLLM HND and packed rows are 128-256 bytes).
  uint64_t kernel_max_run_bytes = 64 << 10;

  Status Validate() const;
};

// The CUDA copy engine: dedicated low-priority streams (one for saves, one
// for loads), an event per layer on loads, and one completion thread that
// polls events and runs the callbacks. Host buffers that are registered
// (PinHostMemory, cudaHostAlloc) take the chosen path; other host buffers are
// always copied by DMA. Per-copy results as CopyEngine says: a failed CUDA
// call is retried block by block so that only the blocks whose own call
// fails are dropped (with the CUDA error text); with the kernel path one
// launch moves a whole layer, so a failed launch fails every block of it. A
// sticky CUDA error (illegal address, launch failure, ECC: the context is
// unusable) fails every copy in flight and every later call.
// With kAuto, a device the copy kernel was not built for (see
// CMAKE_CUDA_ARCHITECTURES) is served by DMA, with a warning; kKernel is then
// NotSupported. NotSupported with the CUDA error text when the build has no
// CUDA, the driver is missing or there is no such device; InvalidArgument
// for bad options, a tensor on another device, or one smaller than
// EngineTensorBytes(layout).
KVTIER_EXPORT Result<std::unique_ptr<CopyEngine>> CreateCudaCopyEngine(
    const CudaCopyEngineOptions& options);

}  // namespace kvtier
