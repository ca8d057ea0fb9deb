#!/usr/bin/env bash
# Builds kvtier with CUDA in build-gpucheck/ (Release), runs the tests
# labelled `gpu` and the copy-engine bandwidth benchmark (every layout, DMA
# and kernel path, D2H and H2D, next to cudaMemcpyAsync of one pinned
# buffer). Fails at once, saying why, when there is no usable GPU or no CUDA
# toolkit. About 2-4 minutes on one GPU, most of it the build.
#
#   tools/gpu-check.sh [blocks-per-call] [repetitions]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KVTIER_GPU_BUILD_DIR:-$root/build-gpucheck}"
jobs="${KVTIER_JOBS:-$(nproc)}"

fail() { echo "gpu-check: FAIL: $*" >&2; exit 1; }

[[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null || fail "no CUDA toolkit (nvcc)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
    fail "nvidia-smi cannot talk to the driver"
else
  echo "gpu-check: nvidia-smi not found; the device query below decides"
fi

echo "== configure + build ($build)"
start=$(date +%s)
mkdir -p "$build"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVTIER_WITH_CUDA=ON \
  -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_TOOLS=ON >"$build/gpu-check-configure.log" 2>&1 ||
  { tail -30 "$build/gpu-check-configure.log"; fail "configure failed (log: $build/gpu-check-configure.log)"; }
ninja -C "$build" -j "$jobs" kvtier_gpu_cuda_test kvtier_gpu_layout_test kvtier-gpu-bench
echo "gpu-check: build took $(( $(date +%s) - start )) s"

# The gpu tests skip (and so pass) without a device: ask the device first.
echo "== device"
"$build/tools/bench/kvtier-gpu-bench" probe || fail "no usable CUDA device (see above)"

echo "== tests (label gpu)"
log="$build/gpu-check-ctest.log"
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 120 -j 4 >"$log" 2>&1 ||
  { tail -40 "$log"; fail "gpu tests failed (log: $log)"; }
grep -E "tests passed|Total Test time" "$log"
if grep -q "The following tests did not run" "$log"; then
  grep -A5 "did not run" "$log"
  fail "gpu tests skipped although a device is present"
fi
"$build/tests/gpu/kvtier_gpu_layout_test" --gtest_brief=1 | tail -1

echo "== bandwidth"
"$build/tools/bench/kvtier-gpu-bench" "${1:-32}" "${2:-3}"
echo "gpu-check: PASS in $(( $(date +%s) - start )) s"
