#!/usr/bin/env bash
# Builds kvtier with CUDA in build-gpucheck/ (Release), runs the tests
# labelled `gpu` and the copy-engine bandwidth benchmark (every layout, DMA
# and kernel path, D2H and H2D, next to cudaMemcpyAsync of one pinned
# buffer), printing all of it. About 2-4 minutes on one GPU, most of it the
# build.
#
#   tools/gpu-check.sh [blocks-per-call] [repetitions]
#
# Exit status: 0 all passed; 1 a build, test or benchmark failure; 2 this
# machine cannot run the check (no CUDA toolkit, no driver or no device),
# found by a small probe before anything is built. KVTIER_GPU_CHECK_NO_DEVICE=build
# builds and runs the gpu tests anyway on such a machine (they must skip,
# naming the CUDA error) and then exits 2. KVTIER_GPU_BUILD_DIR and
# KVTIER_JOBS override the build directory and the build parallelism.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KVTIER_GPU_BUILD_DIR:-$root/build-gpucheck}"
jobs="${KVTIER_JOBS:-$(nproc)}"
start=$(date +%s)

fail() { echo "gpu-check: FAIL: $*" >&2; exit 1; }
cannot() { echo "gpu-check: CANNOT RUN HERE: $*" >&2; exit 2; }

nvcc=/usr/local/cuda/bin/nvcc
[[ -x $nvcc ]] || nvcc="$(command -v nvcc || true)"
[[ -n $nvcc ]] || cannot "no CUDA toolkit (nvcc)"

# A device probe that needs no kvtier build: a no-device machine stops here
# in seconds, with the CUDA error text.
echo "== device probe"
mkdir -p "$build"
cat >"$build/gpu-check-probe.cu" <<'EOF'
#include <cstdio>
#include <cuda_runtime_api.h>
int main() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    std::printf("cudaGetDeviceCount: %s: %s\n", cudaGetErrorName(err), cudaGetErrorString(err));
    return 1;
  }
  if (n == 0) { std::printf("no CUDA device\n"); return 1; }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("%d device(s); driver API %d, runtime %d\n", n, driver, runtime);
  return 0;
}
EOF
"$nvcc" -o "$build/gpu-check-probe" "$build/gpu-check-probe.cu" ||
  fail "nvcc cannot build a one-line probe"
device_ok=1
probe_out="$("$build/gpu-check-probe")" || device_ok=0
echo "$probe_out"
if [[ $device_ok -eq 1 ]] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
fi
if [[ $device_ok -eq 0 && "${KVTIER_GPU_CHECK_NO_DEVICE:-}" != build ]]; then
  cannot "no usable CUDA device: $probe_out"
fi

echo "== dependencies"
bash "$root/scripts/install-deps.sh" --check ||
  echo "gpu-check: packages are missing (above); the configure below says whether it matters"

echo "== configure + build ($build)"
# Only what the GPU tests and the benchmark need: the NVMe, Redis and RDMA
# backends stay out, which saves build time and dependencies.
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVTIER_WITH_CUDA=ON \
  -DKVTIER_WITH_URING=OFF -DKVTIER_WITH_REDIS=OFF -DKVTIER_WITH_ROCKSDB=OFF \
  -DKVTIER_WITH_RDMA=OFF -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_TOOLS=ON \
  >"$build/gpu-check-configure.log" 2>&1 ||
  { tail -30 "$build/gpu-check-configure.log"; fail "configure failed (log: $build/gpu-check-configure.log)"; }
ninja -C "$build" -j "$jobs" kvtier_gpu_cuda_test kvtier_gpu_layout_test kvtier-gpu-bench ||
  fail "build failed"
echo "gpu-check: build took $(( $(date +%s) - start )) s"

echo "== tests (label gpu)"
log="$build/gpu-check-ctest.log"
status=0
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 120 -j 4 >"$log" 2>&1 || status=$?
grep -v -E "^ +Start +[0-9]+: " "$log"  # every result; the "Start" lines are noise
[[ $status -eq 0 ]] || fail "gpu tests failed (log: $log)"
# ctest lists skipped tests under "did not run". With a device only the
# no-device test may skip.
skipped="$(sed -n '/The following tests did not run/,$p' "$log" | grep -E '^\s+[0-9]+ - ' |
  grep -v 'CudaCopyEngineNoDeviceTest' || true)"
echo "== stand-in layout tests"
layout_log="$build/gpu-check-layout.log"
layout_status=0
"$build/tests/gpu/kvtier_gpu_layout_test" --gtest_brief=1 >"$layout_log" 2>&1 || layout_status=$?
if [[ $layout_status -ne 0 ]]; then
  cat "$layout_log"  # --gtest_brief: the failures and the summary only
  fail "stand-in layout tests failed (exit $layout_status, log: $layout_log)"
fi
tail -3 "$layout_log"
if [[ $device_ok -eq 0 ]]; then
  echo "gpu-check: built; $(echo "$skipped" | grep -c ' - ' || true) gpu tests skipped as expected without a device"
  cannot "no usable CUDA device: $probe_out (KVTIER_GPU_CHECK_NO_DEVICE=build: build and skips checked)"
fi
[[ -z $skipped ]] || { echo "$skipped"; fail "gpu tests skipped although a device is present"; }

echo "== bandwidth"
"$build/tools/bench/kvtier-gpu-bench" probe || fail "kvtier-gpu-bench cannot use the device"
"$build/tools/bench/kvtier-gpu-bench" "${1:-32}" "${2:-3}" || fail "benchmark failed"
echo "gpu-check: PASS in $(( $(date +%s) - start )) s"
