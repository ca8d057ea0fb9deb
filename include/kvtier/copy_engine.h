// CopyEngine: moves blocks between the engine's paged KV cache and host
// blocks. Save gathers pages into contiguous host blocks; load scatters host
// blocks into pages, layer by layer, so the engine can start computing layer i
// while later layers are still in flight.
//
// Two implementations share the offset functions of kv_layout.h: the CUDA
// engine (gpu/, when built with CUDA) and the host stand-in below, whose
// "device" is a host-memory pool laid out exactly like the engine's cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "kvtier/export.h"
#include "kvtier/kv_layout.h"
#include "kvtier/status.h"

namespace kvtier {

// One block to move. `host` is a canonical host block of layout.BlockBytes().
struct BlockCopy {
  uint32_t engine_block = 0;
  std::span<std::byte> host;
};

using CopyDone = std::function<void(Status)>;
using LayerDone = std::function<void(uint32_t layer)>;

class KVTIER_EXPORT CopyEngine {
 public:
  virtual ~CopyEngine() = default;

  virtual const KvLayout& layout() const = 0;

  // Copies each engine block into its host buffer. `done` runs exactly once,
  // possibly on another thread, after every byte has landed (or with the first
  // error). The copies span may be released when Gather returns; the host
  // buffers must stay valid until `done` runs. Blocks out of range or buffers
  // of the wrong size fail with InvalidArgument before anything is copied.
  virtual void Gather(std::span<const BlockCopy> copies, CopyDone done) = 0;

  // Copies each host buffer into its engine block. `on_layer(l)` runs, in
  // increasing l, once layer l of every block has landed; then `done` runs
  // exactly once. `on_layer` may be empty.
  virtual void Scatter(std::span<const BlockCopy> copies, LayerDone on_layer, CopyDone done) = 0;
};

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
};

}  // namespace kvtier
