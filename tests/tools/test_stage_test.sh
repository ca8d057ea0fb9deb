#!/usr/bin/env bash
# scripts/test_stage.sh's build_and_test refuses a stage whose test binaries
# were not all built: ctest lists a missing binary as an unlabelled
# <binary>_NOT_BUILT placeholder that `ctest -L` drops, so its tests would
# silently never run. Stub cmake and ctest on PATH stand in for the build and
# the test run; the stub ctest lists the placeholders in $FAKE_LISTING.
# Usage: test_stage_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/build/tests"
printf '#!/bin/sh\nexit 0\n' >"$work/bin/cmake"
cat >"$work/bin/ctest" <<'EOF'
#!/bin/sh
for a in "$@"; do
  if [ "$a" = -N ]; then
    cat "$FAKE_LISTING"
    exit 0
  fi
done
echo "100% tests passed, 0 tests failed out of 3"
EOF
chmod +x "$work/bin/cmake" "$work/bin/ctest"
export PATH="$work/bin:$PATH"
export FAKE_LISTING="$work/listing"

kvtier_step() { :; }
KVTIER_CMAKE_COMMON=()
KVTIER_JOBS=1
# shellcheck source=scripts/test_stage.sh
source "$src/scripts/test_stage.sh"

failures=0
# stage EXPECTED_RC RESULT_SUBSTRING TARGETS PLACEHOLDER...: runs a stage in
# $work/build whose ctest -N lists one real test and the placeholders.
stage() {
  local want="$1" says="$2" targets="$3"
  shift 3
  {
    echo "Test project $work/build"
    local p
    # What ctest -N prints about each placeholder before the list.
    for p in "$@"; do
      printf 'Could not find executable %s\nLooked in the following places:\n' "$p"
      printf '%s\nRelease/%s\nDebug/%s\nUnable to find executable: %s\n' "$p" "$p" "$p" "$p"
    done
    echo "  Test #1: Suite.Passes"
    local i=2
    for p in "$@"; do
      echo "  Test #$i: $p"
      i=$((i + 1))
    done
    echo
    echo "Total Tests: $i"
  } >"$FAKE_LISTING"
  local rc=0
  RESULT_t=""
  build_and_test t "$work/build" "-L concurrency|remote|redis" "$targets" >/dev/null 2>&1 || rc=$?
  if [[ $rc -ne $want || "$RESULT_t" != *"$says"* ]]; then
    echo "FAIL: targets '$targets', listing $*: rc $rc (want $want), result '$RESULT_t'" \
      "(want '$says')" >&2
    failures=$((failures + 1))
  else
    echo "ok: targets '$targets', listing $*: $RESULT_t"
  fi
}

printf 'kvtier_remote_test\nkvtier_redis_replay_test\n' >"$work/build/tests/kvtier_tsan_tests.binaries"
# A binary of the stage's labels is missing: the stage fails and names it.
stage 1 "FAIL (not built: kvtier_redis_replay_test)" kvtier_tsan_tests \
  kvtier_redis_replay_test_NOT_BUILT kvtier_policy_test_NOT_BUILT
# Binaries of other labels, which this stage does not build, may be missing.
stage 0 "PASS" kvtier_tsan_tests kvtier_policy_test_NOT_BUILT
# A stage that builds everything may miss nothing.
stage 1 "FAIL (not built: kvtier_policy_test)" "" kvtier_policy_test_NOT_BUILT
stage 0 "PASS" ""
# A target without its list of binaries cannot be checked: refused.
stage 1 "FAIL (no $work/build/tests/kvtier_other.binaries)" kvtier_other

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
