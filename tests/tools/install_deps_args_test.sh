#!/usr/bin/env bash
# scripts/install-deps.sh refuses arguments it does not know (exit 2) before
# it installs anything; --check lists what is missing and installs nothing.
# Stubs on PATH report every package missing and record any apt-get call.
# Usage: install_deps_args_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
stubs="$(mktemp -d)"
trap 'rm -rf "$stubs"' EXIT
printf '#!/bin/sh\nexit 0\n' >"$stubs/dpkg-query"
printf '#!/bin/sh\necho "apt-get $*" >>"%s/calls"\nexit 0\n' "$stubs" >"$stubs/apt-get"
printf '#!/bin/sh\nexec "$@"\n' >"$stubs/sudo"
chmod +x "$stubs/dpkg-query" "$stubs/apt-get" "$stubs/sudo"

failures=0
# expect LABEL STATUS ARGS...: install-deps.sh ARGS exits STATUS, no apt-get.
expect() {
  local label="$1" want="$2"
  shift 2
  local rc=0
  rm -f "$stubs/calls"
  PATH="$stubs:$PATH" timeout 60 bash "$src/scripts/install-deps.sh" "$@" >/dev/null 2>&1 || rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL: $label: install-deps.sh $* exited $rc, expected $want" >&2
    failures=$((failures + 1))
  fi
  if [[ -e "$stubs/calls" ]]; then
    echo "FAIL: $label: install-deps.sh $* ran: $(cat "$stubs/calls")" >&2
    failures=$((failures + 1))
  fi
}
expect misspelt-check 2 --chek
expect help 2 --help
expect check-and-more 2 --check --yes
expect check 1 --check
[[ $failures -eq 0 ]] || exit 1
echo "install-deps.sh argument checks passed"
