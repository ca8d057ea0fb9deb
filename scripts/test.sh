#!/usr/bin/env bash
# Builds kvtier three times and runs the test suite of each build:
#   build/       RelWithDebInfo: every ctest test (GPU and RDMA tests skip
#                themselves when the hardware is absent)
#   build-asan/  Debug -O1 with -fsanitize=address,undefined: every test but
#                those labelled `package` and `bench`
#   build-tsan/  Debug -O1 with -fsanitize=thread: the tests labelled
#                `concurrency`, `remote` or `redis` (the binaries of threaded
#                code: core, io, runtime, tiers, NVMe, Redis, admin, remote,
#                the host copy engine, kvtier-bench's pumps)
# Every backend whose dependency install-deps.sh installs is required (ON),
# so a missing one fails the configure instead of leaving its tests out; and
# a test that skips fails its stage unless it is labelled `gpu` or `rdma` or
# scripts/allowed_skips.txt lets it skip there.
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
# test kills it. The suppressions path is quoted for the sanitizers' option
# parser, which splits values at spaces, commas and colons.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=\"$KVTIER_ROOT/scripts/tsan.supp\"}"

# shellcheck source=scripts/test_stage.sh
source "$KVTIER_ROOT/scripts/test_stage.sh"  # build_and_test

kvtier_step "dependencies"
bash scripts/install-deps.sh

# CUDA stays AUTO: install-deps.sh does not install the toolkit.
KVTIER_REQUIRED=(-DKVTIER_WITH_URING=ON -DKVTIER_WITH_REDIS=ON -DKVTIER_WITH_ROCKSDB=ON
  -DKVTIER_WITH_REMOTE=ON -DKVTIER_WITH_RDMA=ON)

RESULT_normal="not run"
RESULT_sanitize="not run"
RESULT_thread="not run"
status=0

build_and_test normal build "" "" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_TOOLS=ON \
  "${KVTIER_REQUIRED[@]}" ||
  status=1

# Sanitized code runs several times slower: tests stretch their wall-clock
# bounds by this factor (tests/support/time_scale.h).
export KVTIER_TEST_TIME_SCALE="${KVTIER_TEST_TIME_SCALE:-4}"

build_and_test sanitize build-asan "-LE package|bench" "" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
  -DKVTIER_SANITIZE=address,undefined -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_TOOLS=ON \
  "${KVTIER_REQUIRED[@]}" ||
  status=1

# ThreadSanitizer on the concurrent parts only: completions and worker
# pools, the io_uring engine, the runtime, the host and NVMe tiers, the
# Redis tier against redis-server, the admin endpoint, the remote tier
# against kvtier-memd processes, the host copy engine and kvtier-bench's
# pumps.
# kvtier_tsan_tests builds every test binary carrying these labels
# (KVTIER_TSAN_LABELS in tests/CMakeLists.txt) and kvtier-memd with them.
build_and_test thread build-tsan "-L concurrency|remote|redis" "kvtier_tsan_tests" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
  -DKVTIER_SANITIZE=thread -DKVTIER_BUILD_TESTS=ON -DKVTIER_BUILD_TOOLS=ON \
  "${KVTIER_REQUIRED[@]}" ||
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
