#!/usr/bin/env bash
# Builds kvtier twice and runs the test suite of each build:
#   build/       RelWithDebInfo: every ctest test (GPU and RDMA tests skip
#                themselves when the hardware is absent)
#   build-asan/  Debug -O1 with -fsanitize=address,undefined: every test but
#                those labelled `package` and `bench`
#   build-tsan/  Debug -O1 with -fsanitize=thread: the tests labelled
#                `concurrency`, `remote` or `redis` (the binaries of threaded
#                code: core, io, runtime, tiers, NVMe, Redis, admin, remote)
# Exits 0 only when every build compiles and all their tests pass.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Sanitizer runtime settings: fail on the first report, with a stack trace.
# protect_shadow_gap=0 lets the CUDA runtime map memory under ASan.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:protect_shadow_gap=0:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# A race in a server the tests start (kvtier-memd) must end it, so the test
# talking to it fails, rather than print a report nobody reads before the
# test kills it.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$KVTIER_ROOT/scripts/tsan.supp}"

# build_and_test NAME DIR "CTEST ARGS" "TARGETS" CMAKE ARGS...   (TARGETS "" = all)
# Sets RESULT_<NAME> to a one-line outcome and returns non-zero on failure.
build_and_test() {
  local name="$1" dir="$2" ctest_args="$3" targets="$4"
  shift 4
  local log="$dir/test-summary.log"
  local -a extra
  read -r -a extra <<<"$ctest_args"

  kvtier_step "[$name] configure $dir"
  if ! cmake -S . -B "$dir" "${KVTIER_CMAKE_COMMON[@]}" "$@"; then
    printf -v "RESULT_$name" '%s' "FAIL (configure)"
    return 1
  fi
  kvtier_step "[$name] build $dir"
  local -a target_args=()
  local t
  for t in $targets; do target_args+=(--target "$t"); done
  if ! cmake --build "$dir" -j "$KVTIER_JOBS" "${target_args[@]}"; then
    printf -v "RESULT_$name" '%s' "FAIL (build)"
    return 1
  fi
  kvtier_step "[$name] ctest ${extra[*]}"
  local rc=0
  ctest --test-dir "$dir" --output-on-failure -j "$KVTIER_JOBS" --no-tests=error \
    "${extra[@]}" 2>&1 | tee "$log" || rc=$?
  local summary
  summary="$(grep -E 'tests passed|No tests were found' "$log" | tail -n 1 || true)"
  if [[ $rc -ne 0 ]]; then
    printf -v "RESULT_$name" '%s' "FAIL (${summary:-ctest exited $rc})"
    return 1
  fi
  printf -v "RESULT_$name" '%s' "PASS (${summary:-no summary})"
}

kvtier_step "dependencies"
bash scripts/install-deps.sh

RESULT_normal="not run"
RESULT_sanitize="not run"
RESULT_thread="not run"
status=0

build_and_test normal build "" "" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_TOOLS=ON ||
  status=1

# Sanitized code runs several times slower: tests stretch their wall-clock
# bounds by this factor (tests/support/time_scale.h).
export KVTIER_TEST_TIME_SCALE="${KVTIER_TEST_TIME_SCALE:-4}"

build_and_test sanitize build-asan "-LE package|bench" "" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
  -DKVTIER_SANITIZE=address,undefined -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_TOOLS=ON ||
  status=1

# ThreadSanitizer on the concurrent parts only: completions and worker
# pools, the io_uring engine, the runtime, the host and NVMe tiers, the
# Redis tier against redis-server, the admin endpoint, and the remote tier
# against kvtier-memd processes.
TSAN_TARGETS="kvtier_core_test kvtier_io_pool_test kvtier_io_test kvtier_runtime_test"
TSAN_TARGETS+=" kvtier_tiers_test kvtier_nvme_test kvtier_redis_test kvtier_redis_cluster_test"
TSAN_TARGETS+=" kvtier_admin_test kvtier_remote_test kvtier_remote_replay_test kvtier-memd"
build_and_test thread build-tsan "-L concurrency|remote|redis" "$TSAN_TARGETS" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
  -DKVTIER_SANITIZE=thread -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_TOOLS=ON ||
  status=1

echo
echo "test.sh summary: normal build: $RESULT_normal; address,undefined build: $RESULT_sanitize;" \
  "thread build (concurrency, remote and redis tests): $RESULT_thread"
if [[ $status -eq 0 ]]; then
  echo "test.sh: PASS"
else
  echo "test.sh: FAIL"
fi
exit "$status"
