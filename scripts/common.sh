#!/usr/bin/env bash
# Shared settings for scripts/*.sh; sourced, not run.
# Puts the shell at the repository root and sets up build parallelism,
# ccache and CI-friendly (colourless) output.

KVTIER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$KVTIER_ROOT" || exit 1

# Paths relative to the checkout, so ccache hits across build folders and
# clones of the repository.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$KVTIER_ROOT}"

# Two cores by default; override with KVTIER_JOBS.
KVTIER_JOBS="${KVTIER_JOBS:-2}"
export CMAKE_BUILD_PARALLEL_LEVEL="$KVTIER_JOBS"

KVTIER_CMAKE_COMMON=(-G Ninja)
if [[ "${CI:-}" == true || "${CI:-}" == 1 ]]; then
  export NO_COLOR=1 GTEST_COLOR=no CLICOLOR=0 TERM=dumb
  KVTIER_CMAKE_COMMON+=(-DCMAKE_COLOR_DIAGNOSTICS=OFF)
fi

# Prints a section heading.
kvtier_step() {
  echo
  echo "==> $*"
}
