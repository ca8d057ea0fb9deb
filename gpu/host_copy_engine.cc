// The host stand-in copy engine: its "device" is an anonymous mapping shaped
// like the engine's KV cache, and every copy is a memcpy of the runs that
// gpu/layout_runs.h derives from the layout, so it moves exactly the bytes a
// CUDA engine would.

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "gpu/layer_report.h"
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

// Shared state is the layout (immutable), the pool bytes and the fault
// state; each call keeps its run list on its own stack, so calls on distinct
// engine blocks may run concurrently.
class HostCopyEngineImpl final : public HostCopyEngine {
 public:
  HostCopyEngineImpl(const KvLayout& layout, MappedPool pool)
      : layout_(layout), tensor_bytes_(EngineTensorBytes(layout)), pool_(std::move(pool)) {}

  const KvLayout& layout() const override { return layout_; }

  void Gather(std::span<const BlockCopy> copies, CopyDone done) override {
    std::vector<Status> results = internal::CheckEachBlockCopy(
        layout_, copies, /*unique_blocks=*/false, /*disjoint_hosts=*/true);
    // Runs are rebuilt block by block.
    std::vector<internal::CopyRun> runs;
    if (Reserve(internal::MaxBlockRuns(layout_), runs, results)) GatherAll(copies, runs, results);
    internal::ReportDone(done, std::move(results));  // what it throws stays with it
  }

  void Scatter(std::span<const BlockCopy> copies, LayerDone on_layer, CopyDone done) override {
    std::vector<Status> results = internal::CheckEachBlockCopy(
        layout_, copies, /*unique_blocks=*/true, /*disjoint_hosts=*/false);
    // Runs are rebuilt layer by layer, block by block.
    std::vector<internal::CopyRun> runs;
    if (Reserve(internal::MaxLayerRuns(layout_), runs, results)) {
      ScatterAll(copies, on_layer, runs, results);
    }
    internal::ReportDone(done, std::move(results));  // what it throws stays with it
  }

  std::span<std::byte> Tensor(uint32_t index) override {
    if (index >= EngineTensorCount(layout_)) return {};
    return {pool_.data() + uint64_t{index} * tensor_bytes_, tensor_bytes_};
  }

  Status WriteBlock(uint32_t engine_block, std::span<const std::byte> host) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckBlockCopy(layout_, engine_block, host.size()));
    return Guarded([&] {
      std::vector<internal::CopyRun> runs;
      runs.reserve(internal::MaxBlockRuns(layout_));
      internal::AppendBlockRuns(layout_, engine_block, &runs);
      ToEngine(runs, host.data());
    });
  }

  Status ReadBlock(uint32_t engine_block, std::span<std::byte> host) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckBlockCopy(layout_, engine_block, host.size()));
    return Guarded([&] {
      std::vector<internal::CopyRun> runs;
      runs.reserve(internal::MaxBlockRuns(layout_));
      internal::AppendBlockRuns(layout_, engine_block, &runs);
      ToHost(runs, host.data());
    });
  }

  void TEST_SetFaultHook(CopyFaultHook hook) override {
    std::lock_guard lock(mu_);
    hook_ = std::move(hook);
    lost_ = Status::Ok();
    faults_.store(static_cast<bool>(hook_), std::memory_order_release);
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

  // Sizes `runs` up front for the most runs one block (Gather) or one layer
  // (Scatter) of this layout can take, so that the copy loops never
  // allocate; nothing when no copy passed its checks. On failure every
  // checked copy fails and false is returned.
  static bool Reserve(uint64_t max_runs, std::vector<internal::CopyRun>& runs,
                      std::vector<Status>& results) {
    bool any = false;
    for (const Status& r : results) any |= r.ok();
    Status st = Guarded([&] { runs.reserve(any ? max_runs : 0); });
    if (st.ok()) return true;
    for (Status& r : results) {
      if (r.ok()) r = st;
    }
    return false;
  }

  // OK when layer `layer` of `block` may be copied; otherwise why not, with
  // *lost set when the device is lost (earlier, or by this very fault).
  Status Admit(uint32_t block, uint32_t layer, bool* lost) {
    // Without a hook nothing can fail a copy (lost_ is set only by a hook's
    // fault): real copies skip the lock.
    if (!faults_.load(std::memory_order_acquire)) return Status::Ok();
    std::lock_guard lock(mu_);
    if (!lost_.ok()) {
      *lost = true;
      return lost_;
    }
    if (!hook_) return Status::Ok();
    CopyFault fault = hook_(block, layer);
    if (fault.sticky && !fault.status.ok()) {
      lost_ = fault.status;
      *lost = true;
    }
    return fault.status;
  }

  static std::string What(bool gather, uint32_t block) {
    return std::string("host copy engine: ") + (gather ? "save" : "load") + " of engine block " +
           std::to_string(block);
  }

  // Block by block; a lost device fails the block it hits and every later one.
  void GatherAll(std::span<const BlockCopy> copies, std::vector<internal::CopyRun>& runs,
                 std::vector<Status>& results) {
    Status lost_status;
    for (size_t i = 0; i < copies.size(); ++i) {
      if (!results[i].ok()) continue;
      const uint32_t block = copies[i].engine_block;
      if (!lost_status.ok()) {
        results[i] = lost_status.WithContext(What(true, block));
        continue;
      }
      bool lost = false;
      for (uint32_t layer = 0; layer < layout_.num_layers && results[i].ok(); ++layer) {
        Status st = Admit(block, layer, &lost);
        if (!st.ok()) results[i] = st.WithContext(What(true, block));
        if (lost) lost_status = st;
      }
      if (!results[i].ok()) continue;
      runs.clear();
      internal::AppendBlockRuns(layout_, block, &runs);
      ToHost(runs, copies[i].host.data());
    }
  }

  void FailRemaining(std::span<const BlockCopy> copies, const Status& why, uint32_t layer,
                     std::vector<Status>& results) const {
    for (size_t i = 0; i < copies.size(); ++i) {
      if (!results[i].ok()) continue;
      results[i] =
          why.WithContext(What(false, copies[i].engine_block) + " layer " + std::to_string(layer));
    }
  }

  // Layer-major so that on_layer(l) can report layer l of every block. A
  // block is complete after its last layer: a lost device fails every block
  // whose last layer has not landed, and no further layer is reported.
  void ScatterAll(std::span<const BlockCopy> copies, const LayerDone& on_layer,
                  std::vector<internal::CopyRun>& runs, std::vector<Status>& results) {
    Status lost_status;
    for (uint32_t layer = 0; layer < layout_.num_layers; ++layer) {
      for (size_t i = 0; i < copies.size(); ++i) {
        if (!results[i].ok()) continue;
        const uint32_t block = copies[i].engine_block;
        bool lost = !lost_status.ok();
        Status st = lost ? lost_status : Admit(block, layer, &lost);
        if (lost) lost_status = st;
        if (!st.ok()) {
          results[i] = st.WithContext(What(false, block) + " layer " + std::to_string(layer));
          continue;
        }
        runs.clear();
        internal::AppendLayerRuns(layout_, block, layer, &runs);
        ToEngine(runs, copies[i].host.data());
      }
      if (!lost_status.ok()) {
        // Blocks copied before the fault in the last layer are complete.
        if (layer + 1 < layout_.num_layers) FailRemaining(copies, lost_status, layer, results);
        return;
      }
      if (!on_layer) continue;
      Status reported = internal::ReportLayer(on_layer, layer);
      if (!reported.ok()) {
        // The caller's per-layer work for these blocks is broken: no later
        // layer is copied or reported, and `done` still runs.
        FailRemaining(copies, reported, layer, results);
        return;
      }
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
  std::mutex mu_;
  CopyFaultHook hook_;               // guarded by mu_
  Status lost_;                      // guarded by mu_; set by a sticky fault
  std::atomic<bool> faults_{false};  // a hook is set
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
