#!/usr/bin/env bash
# build_and_test, one stage of scripts/test.sh (configure, build, check that
# every test binary the stage runs was built, ctest); sourced, not run.
# Needs kvtier_step, KVTIER_CMAKE_COMMON and KVTIER_JOBS (scripts/common.sh).

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
  if [[ $rc -ne 0 ]]; then
    printf -v "RESULT_$name" '%s' "FAIL (${summary:-ctest exited $rc})"
    return 1
  fi
  printf -v "RESULT_$name" '%s' "PASS (${summary:-no summary})"
}
