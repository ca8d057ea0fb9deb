#!/usr/bin/env bash
# The TSAN_OPTIONS default of scripts/test.sh names its suppressions file so
# that a checkout path with a space, a comma or a colon (the sanitizers'
# option separators) still reaches ThreadSanitizer whole. Runs a one-line
# TSan program under that default with the checkout "moved" to such a path;
# exits 77 (skipped) if the compiler cannot build one.
# Usage: tsan_options_test.sh SOURCE_DIR CXX
set -euo pipefail
src="$1"
cxx="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

printf 'int main() { return 0; }\n' >"$work/main.cc"
if ! "$cxx" -fsanitize=thread -o "$work/tsan_main" "$work/main.cc" 2>"$work/cc.log"; then
  echo "SKIP: $cxx cannot build with -fsanitize=thread:" >&2
  cat "$work/cc.log" >&2
  exit 77
fi

root="$work/a checkout, with:separators"
mkdir -p "$root/scripts"
cp "$src/scripts/tsan.supp" "$root/scripts/"
line="$(grep -E '^export TSAN_OPTIONS=' "$src/scripts/test.sh")"
unset TSAN_OPTIONS
KVTIER_ROOT="$root"  # read by the eval'd line
export KVTIER_ROOT
eval "$line"
echo "TSAN_OPTIONS=$TSAN_OPTIONS"
rc=0
out="$("$work/tsan_main" 2>&1)" || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL: a TSan program exits $rc under test.sh's TSAN_OPTIONS:" >&2
  echo "$out" >&2
  exit 1
fi
echo "PASS"
