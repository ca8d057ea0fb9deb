#!/usr/bin/env bash
# scripts/run.sh's own exit statuses (README): 2 for a bad argument or a
# missing --config/--trace file, found before anything is installed or built,
# and 4 when the build fails, never 1 (kvtier-bench's "wrong bytes").
# A stub cmake on PATH stands in for the build so nothing is compiled, and a
# stub dpkg-query reports every package installed so nothing is installed.
# Usage: run_sh_exit_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
stubs="$(mktemp -d)"
trap 'rm -rf "$stubs"' EXIT
printf '#!/bin/sh\necho "stub cmake $*" >&2\nexit 1\n' >"$stubs/cmake"
printf '#!/bin/sh\nprintf installed\n' >"$stubs/dpkg-query"
chmod +x "$stubs/cmake" "$stubs/dpkg-query"

failures=0
# expect LABEL STATUS STDERR_SUBSTRING ARGS...: run.sh ARGS exits STATUS and
# says STDERR_SUBSTRING.
expect() {
  local label="$1" want="$2" says="$3"
  shift 3
  local err rc=0
  err="$(PATH="$stubs:$PATH" timeout 60 bash "$src/scripts/run.sh" "$@" 2>&1 >/dev/null)" || rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL: $label: run.sh $* exited $rc, expected $want; its stderr:" >&2
    echo "$err" >&2
    failures=$((failures + 1))
  elif [[ "$err" != *"$says"* ]]; then
    echo "FAIL: $label: stderr lacks '$says':" >&2
    echo "$err" >&2
    failures=$((failures + 1))
  else
    echo "ok: $label: exit $rc"
  fi
}

expect "missing --config" 2 "/nonexistent.yaml is missing" --config /nonexistent.yaml
expect "missing --trace=" 2 "/nonexistent.jsonl is missing" --trace=/nonexistent.jsonl
expect "--config without a file" 2 "--config needs a file" --config
# The empty `=` form went on to the build and failed there.
expect "--config= without a file" 2 "--config needs a file" --config=
expect "--trace= without a file" 2 "--trace needs a file" --trace=
expect "build failure" 4 "configuring build-run/ failed"

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
