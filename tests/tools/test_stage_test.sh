#!/usr/bin/env bash
# scripts/test_stage.sh's build_and_test refuses a stage whose test binaries
# were not all built: ctest lists a missing binary as an unlabelled
# <binary>_NOT_BUILT placeholder that `ctest -L` drops, so its tests would
# silently never run. It also refuses a stage in which a test skipped that is
# neither labelled gpu or rdma nor let skip in that stage by
# scripts/allowed_skips.txt. Stub cmake and ctest on PATH stand in for the
# build and the test run: the stub ctest lists the placeholders in
# $FAKE_LISTING and the tests labelled gpu or rdma in $FAKE_HARDWARE, and
# reports the tests in $FAKE_SKIPPED skipped (a ~ in them is a space).
# Usage: test_stage_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/build/tests"
printf '#!/bin/sh\nexit 0\n' >"$work/bin/cmake"
cat >"$work/bin/ctest" <<'EOF'
#!/bin/sh
# numbered FORMAT FIRST NAMES: prints each name ('~' for a space) numbered
# from FIRST, as ctest does.
numbered() {
  i=$2
  for t in $3; do
    printf "$1" "$i" "$(echo "$t" | tr '~' ' ')"
    i=$((i + 1))
  done
}
listing="" hardware=""
for a in "$@"; do
  [ "$a" = -N ] && listing=1
  [ "$a" = '^(gpu|rdma)$' ] && hardware=1
done
if [ -n "$listing" ] && [ -n "$hardware" ]; then
  echo "Test project $PWD"
  numbered '  Test #%d: %s\n' 1 "$FAKE_HARDWARE"
  exit 0
fi
if [ -n "$listing" ]; then
  cat "$FAKE_LISTING"
  exit 0
fi
echo "100% tests passed, 0 tests failed out of 3"
if [ -n "$FAKE_SKIPPED" ]; then
  printf '\nThe following tests did not run:\n'
  numbered '\t%3d - %s (Skipped)\n' 2 "$FAKE_SKIPPED"
fi
EOF
chmod +x "$work/bin/cmake" "$work/bin/ctest"
export PATH="$work/bin:$PATH"
export FAKE_LISTING="$work/listing" FAKE_HARDWARE="" FAKE_SKIPPED=""

kvtier_step() { :; }
KVTIER_CMAKE_COMMON=()
KVTIER_JOBS=1
# shellcheck source=scripts/test_stage.sh
source "$src/scripts/test_stage.sh"

failures=0
# stage EXPECTED_RC RESULT_SUBSTRING TARGETS PLACEHOLDER...: runs stage
# `normal` in $work/build whose ctest -N lists one real test and the
# placeholders; its output is left in $work/out.
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
  RESULT_normal=""
  build_and_test normal "$work/build" "-L concurrency|remote|redis" "$targets" \
    >"$work/out" 2>&1 || rc=$?
  local what="targets '$targets', listing '$*', skipped '$FAKE_SKIPPED'"
  if [[ $rc -ne $want || "$RESULT_normal" != *"$says"* ]]; then
    echo "FAIL: $what: rc $rc (want $want), result '$RESULT_normal' (want '$says')" >&2
    cat "$work/out" >&2
    failures=$((failures + 1))
  else
    echo "ok: $what: $RESULT_normal"
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

# A test that skipped outside the hardware labels and the allowed list (a
# Redis test without redis-server, say) fails the stage, which names it.
FAKE_SKIPPED="RedisTierTest.RoundTrip"
stage 1 "FAIL (skipped, must run: RedisTierTest.RoundTrip)" ""
if ! grep -q "skipped that must run here.*: RedisTierTest.RoundTrip$" "$work/out"; then
  echo "FAIL: the stage's output does not name the skipped test" >&2
  failures=$((failures + 1))
fi
# So does a value-parameterized one, which ctest names with its parameter.
FAKE_SKIPPED="All/HostCopyEngineTest.Copies/nhd~~#~GetParam()~=~1-byte~object~<00>"
stage 1 "FAIL (skipped, must run: All/HostCopyEngineTest.Copies/nhd)" ""
# Tests labelled gpu or rdma may skip.
FAKE_HARDWARE="CudaEngineTest.Copies Device/RdmaPathTest.RoundTrip/Verbs~~#~GetParam()~=~1"
FAKE_SKIPPED="$FAKE_HARDWARE"
stage 0 "PASS" ""
# So may one the list lets skip in every stage ...
FAKE_SKIPPED="HostArena.HugePagesAreGivenBack"
stage 0 "PASS" ""
# ... but not one it lets skip in the sanitizer stage only.
FAKE_SKIPPED="UringEngineFault.SubmitQueuesAllOrNoneWhenAllocationFails"
stage 1 "FAIL (skipped, must run: UringEngineFault.SubmitQueuesAllOrNoneWhenAllocationFails)" ""
# Allowed and hardware skips do not hide a stray one among them.
FAKE_HARDWARE="CudaEngineTest.Copies"
FAKE_SKIPPED="CudaEngineTest.Copies HostArena.HugePagesAreGivenBack NvmeTier.Tmpfs"
stage 1 "FAIL (skipped, must run: NvmeTier.Tmpfs)" ""
FAKE_HARDWARE="" FAKE_SKIPPED=""
# A list with a line that gives no reason is refused, whatever skipped.
real_allowed="$KVTIER_ALLOWED_SKIPS"
KVTIER_ALLOWED_SKIPS="$work/allowed"
printf '# TEST STAGES REASON\n\nHostArena.HugePagesAreGivenBack *\n' >"$KVTIER_ALLOWED_SKIPS"
stage 1 "FAIL (bad list of allowed skips)" ""
KVTIER_ALLOWED_SKIPS="$real_allowed"
# Every line of the real list is TEST STAGES REASON, with known stages.
stages_re='^(\*|(normal|sanitize|thread)(,(normal|sanitize|thread))*)$'
while read -r test stages reason; do
  if [[ -z "$reason" || ! "$stages" =~ $stages_re ]]; then
    echo "FAIL: $KVTIER_ALLOWED_SKIPS: bad line: $test $stages $reason" >&2
    failures=$((failures + 1))
  fi
done < <(grep -vE '^[[:space:]]*(#|$)' "$KVTIER_ALLOWED_SKIPS")

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
