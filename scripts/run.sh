#!/usr/bin/env bash
# Builds kvtier-bench (Release, in build-run/) and replays the first 1,000 requests
# of the Mooncake arXiv trace through the example tier configuration. Extra
# arguments go to `kvtier-bench replay`, e.g. --set tiers.host.capacity=2GiB.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CONFIG=config/examples/default.yaml
TRACE=traces/mooncake_arxiv_trace_first1000.jsonl

kvtier_step "dependencies"
bash scripts/install-deps.sh

kvtier_step "configure build-run/ (Release)"
cmake -S . -B build-run "${KVTIER_CMAKE_COMMON[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DKVTIER_BUILD_TOOLS=ON -DKVTIER_BUILD_TESTS=OFF

kvtier_step "build kvtier-bench"
cmake --build build-run --target kvtier-bench -j "$KVTIER_JOBS"

bench=""
for candidate in build-run/tools/bench/kvtier-bench build-run/bin/kvtier-bench; do
  if [[ -x "$candidate" ]]; then
    bench="$candidate"
    break
  fi
done
if [[ -z "$bench" ]]; then
  bench="$(find build-run -type f -name kvtier-bench -perm -u+x -print -quit)"
fi
[[ -n "$bench" ]] || { echo "run.sh: kvtier-bench was built but not found under build-run/" >&2; exit 1; }
for f in "$CONFIG" "$TRACE"; do
  [[ -f "$f" ]] || { echo "run.sh: $f is missing" >&2; exit 1; }
done

kvtier_step "$bench replay --config $CONFIG --trace $TRACE $*"
exec "$bench" replay --config "$CONFIG" --trace "$TRACE" "$@"
