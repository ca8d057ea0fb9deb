#!/usr/bin/env bash
# Builds kvtier-bench (Release, in build-run/) and replays the first 1,000 requests
# of the Mooncake arXiv trace through the example tier configuration. Extra
# arguments go to `kvtier-bench replay`, e.g. --set tiers.host.capacity=2GiB;
# --config replaces the default config, and --trace, --gen or --generate the
# default trace.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CONFIG=config/examples/default.yaml
TRACE=traces/mooncake_arxiv_trace_first1000.jsonl

# Which defaults the user's arguments replace, and the files they name (the
# options of `kvtier-bench replay` that take a value are skipped with it).
use_config=1
use_trace=1
files=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  arg="${args[i]}"
  value=""
  case "$arg" in
    --config=* | --trace=*) value="${arg#*=}" ;;
    --config | --trace)
      if ((i + 1 >= ${#args[@]})); then
        echo "run.sh: $arg needs a file" >&2
        exit 2
      fi
      value="${args[i + 1]}"
      i=$((i + 1))
      ;;
    --gen | --set | --limit | --timeout-ms | --admin-socket) i=$((i + 1)) ;;
  esac
  case "$arg" in
    --config | --config=*) use_config=0 ;;
    --trace | --trace=* | --gen | --gen=* | --generate) use_trace=0 ;;
  esac
  [[ -z "$value" ]] || files+=("$value")
done
defaults=()
if ((use_config)); then
  defaults+=(--config "$CONFIG")
  files+=("$CONFIG")
fi
if ((use_trace)); then
  defaults+=(--trace "$TRACE")
  files+=("$TRACE")
fi
# Before building: a missing file is found in a second, not after a build.
for f in ${files[@]+"${files[@]}"}; do
  [[ -f "$f" ]] || { echo "run.sh: $f is missing" >&2; exit 1; }
done

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

if ((${#defaults[@]} > 0)); then
  kvtier_step "$bench replay ${defaults[*]} $*"
else
  kvtier_step "$bench replay $*"
fi
exec "$bench" replay ${defaults[@]+"${defaults[@]}"} "$@"
