#!/usr/bin/env bash
# Builds kvtier-bench (Release, in build-run/) and replays the first 1,000 requests
# of the Mooncake arXiv trace through the example tier configuration. Extra
# arguments go to `kvtier-bench replay`, e.g. --set tiers.host.capacity=2GiB;
# --config replaces the default config, and --trace, --gen or --generate the
# default trace.
#
# Exit status: kvtier-bench replay's (0 all succeeded, 1 a loaded block had
# wrong bytes, 2 bad arguments, 3 failures without wrong bytes); run.sh itself
# exits 2 for a bad argument or a missing --config/--trace file (checked
# before anything is installed or built) and 4 when installing the
# dependencies, configuring or building kvtier-bench failed.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CONFIG=config/examples/default.yaml
TRACE=traces/mooncake_arxiv_trace_first1000.jsonl
readonly EXIT_USAGE=2 EXIT_SETUP=4

# setup_failed WHAT: the tool could not be installed or built.
setup_failed() {
  echo "run.sh: $1 failed (exit status $EXIT_SETUP)" >&2
  exit "$EXIT_SETUP"
}

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
    --config=* | --trace=*)
      value="${arg#*=}"
      if [[ -z "$value" ]]; then
        echo "run.sh: ${arg%%=*} needs a file" >&2
        exit "$EXIT_USAGE"
      fi
      ;;
    --config | --trace)
      if ((i + 1 >= ${#args[@]})); then
        echo "run.sh: $arg needs a file" >&2
        exit "$EXIT_USAGE"
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
  [[ -f "$f" ]] || { echo "run.sh: $f is missing" >&2; exit "$EXIT_USAGE"; }
done

kvtier_step "dependencies"
bash scripts/install-deps.sh || setup_failed "installing the dependencies (scripts/install-deps.sh)"

kvtier_step "configure build-run/ (Release)"
cmake -S . -B build-run "${KVTIER_CMAKE_COMMON[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DKVTIER_BUILD_TOOLS=ON -DKVTIER_BUILD_TESTS=OFF || setup_failed "configuring build-run/"

kvtier_step "build kvtier-bench"
cmake --build build-run --target kvtier-bench -j "$KVTIER_JOBS" ||
  setup_failed "building kvtier-bench"

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
[[ -n "$bench" ]] || setup_failed "finding the built kvtier-bench under build-run/"

if ((${#defaults[@]} > 0)); then
  kvtier_step "$bench replay ${defaults[*]} $*"
else
  kvtier_step "$bench replay $*"
fi
exec "$bench" replay ${defaults[@]+"${defaults[@]}"} "$@"
