#!/usr/bin/env bash
# Pipes a live runtime's Prometheus exposition through `promtool check
# metrics` (format and naming lint). Usage: promtool_test.sh <kvtier_metrics_dump>
set -euo pipefail
dump="$1"
if ! command -v promtool >/dev/null; then
  echo "promtool not found: install the Debian package prometheus (scripts/install-deps.sh)" >&2
  exit 1
fi
text="$("$dump")"
families=$(grep -c '^# TYPE ' <<<"$text")
echo "exposition: $(wc -l <<<"$text") lines, ${families} families"
# promtool prints lint problems and exits non-zero on any of them.
out=$(promtool check metrics <<<"$text" 2>&1) || { echo "$out"; exit 1; }
if [[ -n "$out" ]]; then
  echo "$out"
  exit 1
fi
[[ "$families" -ge 30 ]] || { echo "expected at least 30 metric families" >&2; exit 1; }
echo "promtool check metrics: OK"
