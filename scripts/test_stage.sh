#!/usr/bin/env bash
# build_and_test, one stage of scripts/test.sh (configure, build, check that
# every test binary the stage runs was built, ctest, check that no test
# skipped that may not); sourced, not run.
# Needs kvtier_step, KVTIER_CMAKE_COMMON and KVTIER_JOBS (scripts/common.sh).

# The tests a stage lets skip besides those labelled gpu or rdma: one a line,
# TEST STAGES REASON (the file says more).
KVTIER_ALLOWED_SKIPS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/allowed_skips.txt"

# kvtier_stray_skips NAME DIR LOG: sets KVTIER_STRAY_SKIPS to the tests that
# LOG (ctest's output in DIR) reports skipped, minus those labelled gpu or
# rdma and those $KVTIER_ALLOWED_SKIPS lets skip in stage NAME. Returns
# non-zero, saying why, when that list is missing or has a line without a
# reason.
kvtier_stray_skips() {
  local name="$1" dir="$2" log="$3"
  KVTIER_STRAY_SKIPS=()
  local -a skipped=()
  # ctest's closing list: "The following tests did not run:" then lines
  # "<tab>  12 - Suite.Name (Skipped)". A test is known by its name up to the
  # first space: a value-parameterized one is "P/Suite.Name/x  # GetParam() = ...".
  mapfile -t skipped < <(sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+)( .*)? \(Skipped\)$/\1/p' "$log" |
    sort -u)
  if [[ ! -r "$KVTIER_ALLOWED_SKIPS" ]]; then
    echo "test.sh: cannot read the allowed skips, $KVTIER_ALLOWED_SKIPS" >&2
    return 1
  fi
  local -A exempt=()
  local line test stages reason n=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    n=$((n + 1))
    if [[ "$line" =~ ^[[:space:]]*(#|$) ]]; then continue; fi
    read -r test stages reason <<<"$line"
    if [[ -z "$reason" ]]; then
      echo "test.sh: $KVTIER_ALLOWED_SKIPS:$n: not TEST STAGES REASON: $line" >&2
      return 1
    fi
    if [[ "$stages" == "*" || ",$stages," == *",$name,"* ]]; then exempt["$test"]=1; fi
  done <"$KVTIER_ALLOWED_SKIPS"
  ((${#skipped[@]} > 0)) || return 0
  # The tests of the hardware binaries, which skip without a GPU or a NIC.
  while read -r test; do
    exempt["$test"]=1
  done < <(ctest --test-dir "$dir" -N -L '^(gpu|rdma)$' 2>/dev/null |
    sed -nE 's/^ *Test +#[0-9]+: ([^ ]+)( .*)?$/\1/p')
  for test in "${skipped[@]}"; do
    [[ -n "${exempt["$test"]:-}" ]] || KVTIER_STRAY_SKIPS+=("$test")
  done
}

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
  # A test binary the build did not make is listed by ctest as an unlabelled
  # <binary>_NOT_BUILT placeholder, which a label filter drops unseen. None
  # may be missing: of all binaries when the stage builds everything, else
  # of those its TARGETS name in $dir/tests/<target>.binaries.
  local -a lists=() not_built=() missing=()
  for t in $targets; do
    if [[ ! -f "$dir/tests/$t.binaries" ]]; then
      printf -v "RESULT_$name" '%s' "FAIL (no $dir/tests/$t.binaries)"
      return 1
    fi
    lists+=("$dir/tests/$t.binaries")
  done
  mapfile -t not_built < <(ctest --test-dir "$dir" -N 2>/dev/null |
    sed -nE 's/^ *Test +#[0-9]+: ([^ ]+)_NOT_BUILT$/\1/p' | sort -u)
  local binary
  for binary in ${not_built[@]+"${not_built[@]}"}; do
    if ((${#lists[@]} == 0)) || grep -qxF "$binary" "${lists[@]}"; then
      missing+=("$binary")
    fi
  done
  if ((${#missing[@]} > 0)); then
    echo "test.sh: [$name] test binaries not built: ${missing[*]}" >&2
    printf -v "RESULT_$name" '%s' "FAIL (not built: ${missing[*]})"
    return 1
  fi
  kvtier_step "[$name] ctest ${extra[*]}"
  local rc=0
  ctest --test-dir "$dir" --output-on-failure -j "$KVTIER_JOBS" --no-tests=error \
    "${extra[@]}" 2>&1 | tee "$log" || rc=$?
  local summary
  summary="$(grep -E 'tests passed|No tests were found' "$log" | tail -n 1 || true)"
  # A skipped test passes for ctest: only the hardware tests and the allowed
  # ones may skip, or a missing dependency would hide tests that never ran.
  if ! kvtier_stray_skips "$name" "$dir" "$log"; then
    printf -v "RESULT_$name" '%s' "FAIL (bad list of allowed skips)"
    return 1
  fi
  local -a stray=(${KVTIER_STRAY_SKIPS[@]+"${KVTIER_STRAY_SKIPS[@]}"})
  if ((${#stray[@]} > 0)); then
    echo "test.sh: [$name] ${#stray[@]} test(s) skipped that must run here (neither labelled" \
      "gpu or rdma nor in $KVTIER_ALLOWED_SKIPS): ${stray[*]}" >&2
  fi
  if [[ $rc -ne 0 ]]; then
    # The names of the tests that failed go into the one-line outcome, which
    # test.sh prints last, so a log cut to its tail still says which failed.
    local failed
    failed="$(sed -nE '/^The following tests FAILED:/,$ s/^[[:space:]]*[0-9]+ - ([^ ]+)( .*)? \([^)]*\)$/\1/p' \
      "$log" | sort -u | tr '\n' ' ')"
    printf -v "RESULT_$name" '%s' "FAIL (${summary:-ctest exited $rc}${failed:+; failed: ${failed% }})"
    return 1
  fi
  if ((${#stray[@]} > 0)); then
    printf -v "RESULT_$name" '%s' "FAIL (skipped, must run: ${stray[*]})"
    return 1
  fi
  printf -v "RESULT_$name" '%s' "PASS (${summary:-no summary})"
}
