// kvtier-gpu-bench: D2H (save, Gather) and H2D (load, Scatter) bandwidth of
// the CUDA copy engine for every layout and both copy paths, side by side
// with cudaMemcpyAsync of one large pinned buffer of the same total size
// (the ceiling a layout-converting copy can hope for). Built only with CUDA;
// tools/gpu-check.sh runs it.
//
//   kvtier-gpu-bench [blocks] [repetitions]     defaults: 32 blocks, 3 reps
//   kvtier-gpu-bench probe     prints device 0, or the CUDA error and exits 1
//
// Each figure is the best of the repetitions; the host blocks are one pinned
// (cudaHostAlloc) buffer, the engine blocks every other block of the pool so
// that no two copied blocks are adjacent in the engine.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "gpu/cuda/cuda_util.h"
#include "gpu/layout_runs.h"
#include "kvtier/copy_engine.h"

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;

struct Setup {
  KvLayout layout;
  std::vector<void*> tensors;
  cuda::PinnedBuffer host;
  std::vector<BlockCopy> copies;
};

// A Llama-3-8B-like geometry (32 layers, 8 KV heads of 128, fp16, 16-token
// blocks: 2 MiB a block); MLA uses a DeepSeek-like 576-wide latent.
KvLayout BenchLayout(KvLayoutKind kind, uint32_t blocks) {
  KvLayout l;
  l.kind = kind;
  l.num_layers = 32;
  l.num_blocks = 2 * blocks;
  l.block_tokens = 16;
  l.num_kv_heads = kind == KvLayoutKind::kMla ? 1 : 8;
  l.head_size = kind == KvLayoutKind::kMla ? 576 : 128;
  l.elem_bytes = 2;
  return l;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Check(Status st, const char* what) {
  if (st.ok()) return;
  std::fprintf(stderr, "kvtier-gpu-bench: %s: %s\n", what, st.ToString().c_str());
  std::exit(1);
}

// Best wall time of `reps` runs of one engine call.
double TimeEngine(CopyEngine& engine, const Setup& s, bool gather, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    std::promise<Status> p;
    std::future<Status> f = p.get_future();
    const auto t0 = Clock::now();
    auto done = [&](std::vector<Status> results) {
      Status first;  // the first failing copy, if any
      for (Status& st : results) {
        if (!st.ok() && first.ok()) first = std::move(st);
      }
      p.set_value(std::move(first));
    };
    if (gather) {
      engine.Gather(s.copies, done);
    } else {
      engine.Scatter(s.copies, nullptr, done);
    }
    Check(f.get(), gather ? "gather" : "scatter");
    best = std::min(best, Seconds(t0, Clock::now()));
  }
  return best;
}

// Best wall time of one cudaMemcpyAsync of the whole pinned buffer.
double TimeMemcpy(const Setup& s, void* device, bool d2h, int reps, cudaStream_t stream) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    cudaError_t err =
        d2h ? cudaMemcpyAsync(s.host.data(), device, s.host.size(), cudaMemcpyDeviceToHost, stream)
            : cudaMemcpyAsync(device, s.host.data(), s.host.size(), cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    Check(cuda::FromCuda(err, "cudaMemcpyAsync baseline"), "baseline");
    best = std::min(best, Seconds(t0, Clock::now()));
  }
  return best;
}

Setup MakeSetup(KvLayoutKind kind, uint32_t blocks) {
  Setup s;
  s.layout = BenchLayout(kind, blocks);
  for (uint32_t t = 0; t < EngineTensorCount(s.layout); ++t) {
    void* p = nullptr;
    Check(cuda::FromCuda(cudaMalloc(&p, EngineTensorBytes(s.layout)), "cudaMalloc"), "setup");
    Check(cuda::FromCuda(cudaMemset(p, t & 0xff, EngineTensorBytes(s.layout)), "cudaMemset"),
          "setup");
    s.tensors.push_back(p);
  }
  auto host = cuda::PinnedBuffer::Allocate(uint64_t{blocks} * s.layout.BlockBytes());
  Check(host.status(), "pinned host blocks");
  s.host = std::move(host).value();
  for (uint32_t i = 0; i < blocks; ++i) {
    s.copies.push_back(
        {2 * i, s.host.span().subspan(i * s.layout.BlockBytes(), s.layout.BlockBytes())});
  }
  return s;
}

void BenchLayoutKind(KvLayoutKind kind, uint32_t blocks, int reps, void* scratch,
                     cudaStream_t stream) {
  Setup s = MakeSetup(kind, blocks);
  std::vector<internal::CopyRun> runs;
  internal::AppendLayerRuns(s.layout, 0, 0, &runs);
  const uint64_t run_bytes = s.layout.Planes() * s.layout.PageBytes() / runs.size();
  const double gb = static_cast<double>(s.host.size()) / 1e9;
  const double base_d2h = gb / TimeMemcpy(s, scratch, true, reps, stream);
  const double base_h2d = gb / TimeMemcpy(s, scratch, false, reps, stream);
  for (CudaCopyPath path : {CudaCopyPath::kDma, CudaCopyPath::kKernel}) {
    CudaCopyEngineOptions o;
    o.layout = s.layout;
    o.tensors = s.tensors;
    o.compute_stream = stream;
    o.path = path;
    auto engine = CreateCudaCopyEngine(o);
    Check(engine.status(), "create engine");
    const double d2h = gb / TimeEngine(**engine, s, true, reps);
    const double h2d = gb / TimeEngine(**engine, s, false, reps);
    const bool auto_pick = (run_bytes < o.kernel_max_run_bytes) == (path == CudaCopyPath::kKernel);
    std::printf("%-11s %-6s %5s %9llu %8.2f %8.2f %6.2f %8.2f %8.2f %6.2f\n",
                std::string(KvLayoutKindName(kind)).c_str(),
                path == CudaCopyPath::kDma ? "dma" : "kernel", auto_pick ? "*" : "",
                static_cast<unsigned long long>(run_bytes), d2h, base_d2h, d2h / base_d2h, h2d,
                base_h2d, h2d / base_h2d);
  }
  for (void* p : s.tensors) cudaFree(p);
}

int Probe() {
  int devices = 0;
  Check(cuda::FromCuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"), "probe");
  if (devices == 0) {
    std::fprintf(stderr, "kvtier-gpu-bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  Check(cuda::FromCuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"), "probe");
  std::printf("device 0 of %d: %s, %.1f GiB, compute capability %d.%d\n", devices, prop.name,
              prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor);
  return 0;
}

int Main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "probe") return Probe();
  const uint32_t blocks = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 32;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  int devices = 0;
  Check(cuda::FromCuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"), "device");
  if (devices == 0 || blocks == 0 || reps <= 0) {
    std::fprintf(stderr, "kvtier-gpu-bench: %s\n", devices == 0 ? "no CUDA device" : "bad args");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const uint64_t max_block = BenchLayout(KvLayoutKind::kVllmNhd, 1).BlockBytes();
  std::printf("device: %s; %u blocks per call, best of %d; block %.2f MiB (mla %.2f MiB)\n",
              prop.name, blocks, reps, max_block / 1048576.0,
              BenchLayout(KvLayoutKind::kMla, 1).BlockBytes() / 1048576.0);
  std::printf(
      "GB/s = 1e9 bytes/s; memcpy = one cudaMemcpyAsync of the same bytes, pinned; "
      "auto = the path kAuto picks\n");
  std::printf("%-11s %-6s %5s %9s %8s %8s %6s %8s %8s %6s\n", "layout", "path", "auto", "run_bytes",
              "D2H", "memcpy", "ratio", "H2D", "memcpy", "ratio");
  void* scratch = nullptr;
  Check(cuda::FromCuda(cudaMalloc(&scratch, uint64_t{blocks} * max_block), "cudaMalloc"),
        "scratch");
  cudaStream_t stream = nullptr;
  Check(cuda::FromCuda(cudaStreamCreate(&stream), "cudaStreamCreate"), "stream");
  for (KvLayoutKind kind : kAllKvLayoutKinds) BenchLayoutKind(kind, blocks, reps, scratch, stream);
  cudaStreamDestroy(stream);
  cudaFree(scratch);
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }
