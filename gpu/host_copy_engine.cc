// The host stand-in copy engine: its "device" is an anonymous mapping shaped
// like the engine's KV cache, and every copy is a memcpy of the runs that
// gpu/layout_runs.h derives from the layout, so it moves exactly the bytes a
// CUDA engine would.

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "gpu/layout_runs.h"
#include "kvtier/copy_engine.h"

namespace kvtier {
namespace {

static_assert(sizeof(size_t) >= sizeof(uint64_t), "offsets are used as size_t");

// Owns one anonymous private mapping. Anonymous pages read as zero and are
// only backed when touched, so a large pool costs nothing until used.
class MappedPool {
 public:
  static Result<MappedPool> Map(uint64_t bytes) {
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      const int err = errno;
      return Status::ResourceExhausted("host copy engine: cannot allocate a pool of " +
                                       std::to_string(bytes) + " bytes: " + std::strerror(err));
    }
    return MappedPool(static_cast<std::byte*>(base), bytes);
  }

  MappedPool(MappedPool&& other) noexcept
      : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  MappedPool& operator=(MappedPool&& other) noexcept {
    if (this != &other) {
      Release();
      base_ = std::exchange(other.base_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  MappedPool(const MappedPool&) = delete;
  MappedPool& operator=(const MappedPool&) = delete;
  ~MappedPool() { Release(); }

  std::byte* data() const { return base_; }

 private:
  MappedPool(std::byte* base, uint64_t bytes) : base_(base), bytes_(bytes) {}
  void Release() {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = nullptr;
  }

  std::byte* base_ = nullptr;
  uint64_t bytes_ = 0;
};

// Shared state is the layout (immutable) and the pool bytes; each call keeps
// its run list on its own stack, so calls on distinct engine blocks may run
// concurrently.
class HostCopyEngineImpl final : public HostCopyEngine {
 public:
  HostCopyEngineImpl(const KvLayout& layout, MappedPool pool)
      : layout_(layout), tensor_bytes_(EngineTensorBytes(layout)), pool_(std::move(pool)) {}

  const KvLayout& layout() const override { return layout_; }

  void Gather(std::span<const BlockCopy> copies, CopyDone done) override {
    Status st = internal::CheckBlockCopies(layout_, copies, /*unique_blocks=*/false);
    if (st.ok()) st = Guarded([&] { GatherAll(copies); });
    if (done) done(std::move(st));
  }

  void Scatter(std::span<const BlockCopy> copies, LayerDone on_layer, CopyDone done) override {
    Status st = internal::CheckBlockCopies(layout_, copies, /*unique_blocks=*/true);
    if (st.ok()) st = Guarded([&] { ScatterAll(copies, on_layer); });
    if (done) done(std::move(st));
  }

  std::span<std::byte> Tensor(uint32_t index) override {
    if (index >= EngineTensorCount(layout_)) return {};
    return {pool_.data() + uint64_t{index} * tensor_bytes_, tensor_bytes_};
  }

  Status WriteBlock(uint32_t engine_block, std::span<const std::byte> host) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckBlockCopy(layout_, engine_block, host.size()));
    return Guarded([&] {
      std::vector<internal::CopyRun> runs;
      internal::AppendBlockRuns(layout_, engine_block, &runs);
      ToEngine(runs, host.data());
    });
  }

  Status ReadBlock(uint32_t engine_block, std::span<std::byte> host) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckBlockCopy(layout_, engine_block, host.size()));
    return Guarded([&] {
      std::vector<internal::CopyRun> runs;
      internal::AppendBlockRuns(layout_, engine_block, &runs);
      ToHost(runs, host.data());
    });
  }

 private:
  // The only thing that can throw is the run list's allocation; it must not
  // escape into a runtime worker thread.
  template <typename F>
  static Status Guarded(F&& fn) {
    try {
      fn();
      return Status::Ok();
    } catch (const std::bad_alloc&) {
      return Status::ResourceExhausted("host copy engine: out of memory for the copy list");
    }
  }

  void GatherAll(std::span<const BlockCopy> copies) const {
    std::vector<internal::CopyRun> runs;
    for (const BlockCopy& copy : copies) {
      runs.clear();
      internal::AppendBlockRuns(layout_, copy.engine_block, &runs);
      ToHost(runs, copy.host.data());
    }
  }

  // Layer-major so that on_layer(l) can report layer l of every block.
  void ScatterAll(std::span<const BlockCopy> copies, const LayerDone& on_layer) const {
    std::vector<internal::CopyRun> runs;
    for (uint32_t layer = 0; layer < layout_.num_layers; ++layer) {
      for (const BlockCopy& copy : copies) {
        runs.clear();
        internal::AppendLayerRuns(layout_, copy.engine_block, layer, &runs);
        ToEngine(runs, copy.host.data());
      }
      if (on_layer) on_layer(layer);
    }
  }

  std::byte* TensorBase(uint32_t tensor) const {
    return pool_.data() + uint64_t{tensor} * tensor_bytes_;
  }

  void ToHost(const std::vector<internal::CopyRun>& runs, std::byte* host) const {
    for (const internal::CopyRun& run : runs) {
      std::memcpy(host + run.host_offset, TensorBase(run.tensor) + run.engine_offset, run.bytes);
    }
  }

  void ToEngine(const std::vector<internal::CopyRun>& runs, const std::byte* host) const {
    for (const internal::CopyRun& run : runs) {
      std::memcpy(TensorBase(run.tensor) + run.engine_offset, host + run.host_offset, run.bytes);
    }
  }

  const KvLayout layout_;
  const uint64_t tensor_bytes_;
  MappedPool pool_;
};

}  // namespace

Result<std::unique_ptr<HostCopyEngine>> HostCopyEngine::Create(const KvLayout& layout) {
  KVTIER_RETURN_IF_ERROR(layout.Validate().WithContext("host copy engine"));
  const uint64_t pool_bytes = EngineTensorBytes(layout) * EngineTensorCount(layout);
  KVTIER_ASSIGN_OR_RETURN(MappedPool pool, MappedPool::Map(pool_bytes));
  try {
    return std::unique_ptr<HostCopyEngine>(new HostCopyEngineImpl(layout, std::move(pool)));
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("host copy engine: out of memory for the engine object");
  }
}

}  // namespace kvtier
