#!/usr/bin/env bash
# Installs the Debian 12 packages kvtier needs to build and test, skipping those
# already installed. Runs apt-get (through sudo when not root) only when
# something is missing.
#
# Usage: scripts/install-deps.sh [--check]
#   --check  only list missing packages; exit 1 if any are missing
# Any other argument is refused (exit 2) before anything is installed.
set -euo pipefail

# The one list of packages. Add new dependencies here.
PACKAGES=(
  # toolchain
  cmake ninja-build g++ pkg-config ccache clang-14 libclang-rt-14-dev
  # libraries
  libxxhash-dev libyaml-cpp-dev libssl-dev liburing-dev librocksdb-dev libhiredis-dev
  nlohmann-json3-dev libcli11-dev libboost-dev libibverbs-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev fio redis-server redis-tools iperf3
  python3     # the Python binding's test (python/kvtier)
  openssl     # kvtier-bench redis --tls: a certificate for its own server
  prometheus  # promtool: checks the metrics exposition (tests/inspect)
)

is_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" == installed ]]
}

main() {
  if [[ $# -gt 1 || ($# -eq 1 && "$1" != --check) ]]; then
    echo "install-deps: unknown argument(s): $*" >&2
    echo "usage: scripts/install-deps.sh [--check]" >&2
    exit 2
  fi
  if ! command -v dpkg-query >/dev/null; then
    echo "install-deps: dpkg-query not found; install these packages by hand: ${PACKAGES[*]}" >&2
    exit 1
  fi
  local missing=()
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    is_installed "$pkg" || missing+=("$pkg")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps: all ${#PACKAGES[@]} packages are installed"
    return 0
  fi
  echo "install-deps: missing: ${missing[*]}"
  if [[ "${1:-}" == --check ]]; then
    exit 1
  fi

  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null || {
      echo "install-deps: not root and sudo is not available" >&2
      exit 1
    }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

main "$@"
