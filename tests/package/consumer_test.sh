#!/usr/bin/env bash
# Installs a kvtier build into a temporary prefix and builds the consumer
# project in ./consumer against it twice: once through find_package(kvtier)
# and once through pkg-config. Its two programs, one in C++ and one in C on
# the C API, must run and print "OK", and each must print the same thing both
# ways.
#
# Usage: consumer_test.sh BUILD_DIR [CMAKE] [CXX] [GENERATOR] [EXTRA_FLAGS]
#   BUILD_DIR    a configured and built kvtier build tree
#   CMAKE        cmake executable (default: cmake)
#   CXX          C++ compiler for the consumer (default: $CXX or c++)
#   GENERATOR    CMake generator for the consumer (default: cmake's default)
#   EXTRA_FLAGS  extra compile and link flags, e.g. "-fsanitize=address"
# Set KVTIER_KEEP_TMP=1 to keep the temporary directory for inspection.
set -euo pipefail

fail() {
  echo "consumer_test: FAIL: $*" >&2
  exit 1
}

# Prints a step's log and fails when the command does not succeed.
run_logged() {
  local name="$1"
  shift
  local log="$tmp/$name.log"
  if ! "$@" >"$log" 2>&1; then
    echo "---- $name: $* ----" >&2
    cat "$log" >&2
    fail "$name failed (command: $*)"
  fi
}

[[ $# -ge 1 ]] || fail "usage: $0 BUILD_DIR [CMAKE] [CXX] [GENERATOR] [EXTRA_FLAGS]"
build_dir="$(cd "$1" && pwd)" || fail "build directory '$1' does not exist"
cmake_bin="${2:-cmake}"
cxx="${3:-${CXX:-c++}}"
generator="${4:-}"
extra_flags="${5:-}"
consumer_src="$(cd "$(dirname "${BASH_SOURCE[0]}")/consumer" && pwd)"

[[ -f "$build_dir/cmake_install.cmake" ]] || fail "$build_dir is not a configured CMake build tree"
command -v pkg-config >/dev/null || fail "pkg-config is not installed"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/kvtier-package.XXXXXX")"
if [[ "${KVTIER_KEEP_TMP:-0}" == 1 ]]; then
  echo "consumer_test: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
prefix="$tmp/prefix"

# 1. Install only the library's own components: tools of a partial build may be missing.
for component in runtime development; do
  run_logged "install-$component" "$cmake_bin" --install "$build_dir" --prefix "$prefix" \
    --component "$component"
done

lib="$(find "$prefix" -name 'libkvtier.so' -print -quit)"
[[ -n "$lib" ]] || fail "libkvtier.so was not installed under $prefix"
libdir="$(dirname "$lib")"
pcfile="$(find "$prefix" -name kvtier.pc -print -quit)"
[[ -n "$pcfile" ]] || fail "kvtier.pc was not installed under $prefix"
config="$(find "$prefix" -name kvtierConfig.cmake -print -quit)"
[[ -n "$config" ]] || fail "kvtierConfig.cmake was not installed under $prefix"
for f in kvtierConfigVersion.cmake kvtierTargets.cmake; do
  [[ -f "$(dirname "$config")/$f" ]] || fail "$f is missing next to $config"
done
for h in status.h block_key.h block_header.h export.h build_config.h c_api.h; do
  [[ -f "$prefix/include/kvtier/$h" ]] || fail "header kvtier/$h was not installed"
done
# 0.x: the soname names major.minor, so a minor release that changes the ABI
# is not loaded by programs built against the one before.
version="$(sed -n 's/^#define KVTIER_VERSION_STRING "\(.*\)"/\1/p' \
  "$prefix/include/kvtier/build_config.h")"
soname="$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
[[ "$soname" == "libkvtier.so.${version%.*}" ]] ||
  fail "libkvtier.so's soname is '$soname', expected 'libkvtier.so.${version%.*}' (version $version)"
if find "$prefix/include" -name '*.in' | grep -q .; then
  fail "template files were installed: $(find "$prefix/include" -name '*.in' | tr '\n' ' ')"
fi
# Symbols of kvtier::internal itself must stay hidden. Standard-library
# templates instantiated with an internal type (std::future's typeinfo, say)
# have default visibility by the library's own declaration and do not count.
leaked=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3- |
  grep -E '^((typeinfo|typeinfo name|vtable|VTT) for )?kvtier::internal::' || true)
if [[ -n "$leaked" ]]; then
  fail "libkvtier.so exports kvtier::internal symbols (visibility is not hidden): $(head -n 3 <<<"$leaked")"
fi

# 2. find_package(kvtier) from the prefix.
cmake_args=(-S "$consumer_src" -B "$tmp/cmake-build" -DCMAKE_BUILD_TYPE=Release
            -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx"
            -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
[[ -n "$generator" ]] && cmake_args+=(-G "$generator")
[[ -n "$extra_flags" ]] && cmake_args+=(-DCMAKE_CXX_FLAGS="$extra_flags"
                                        -DCMAKE_EXE_LINKER_FLAGS="$extra_flags")
run_logged cmake-configure "$cmake_bin" "${cmake_args[@]}"
found_dir="$(sed -n 's/^kvtier_DIR:PATH=//p' "$tmp/cmake-build/CMakeCache.txt")"
[[ "$found_dir" == "$(dirname "$config")" ]] ||
  fail "find_package(kvtier) used '$found_dir', not the installed '$(dirname "$config")'"
run_logged cmake-build "$cmake_bin" --build "$tmp/cmake-build"
cmake_exe="$tmp/cmake-build/kvtier_consumer"
run_logged cmake-run "$cmake_exe"
tail -n 1 "$tmp/cmake-run.log" | grep -qx OK || fail "CMake consumer did not print OK"
run_logged cmake-c-run "$tmp/cmake-build/kvtier_c_consumer"
tail -n 1 "$tmp/cmake-c-run.log" | grep -qx OK || fail "CMake C consumer did not print OK"

# 3. pkg-config from the prefix.
PKG_CONFIG_PATH="$(dirname "$pcfile")"
export PKG_CONFIG_PATH
pc_version="$(pkg-config --modversion kvtier)" || fail "pkg-config cannot read $pcfile"
grep -qx "kvtier $pc_version" <(head -n 1 "$tmp/cmake-run.log") ||
  fail "kvtier.pc version $pc_version differs from the library's ($(head -n 1 "$tmp/cmake-run.log"))"
read -r -a pc_flags <<<"$(pkg-config --cflags --libs kvtier)"
read -r -a more_flags <<<"$extra_flags"
run_logged pkgconfig-build "$cxx" -std=c++20 "${more_flags[@]}" "$consumer_src/main.cc" \
  "${pc_flags[@]}" -o "$tmp/pc_consumer"
resolved="$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/pc_consumer" | awk '/libkvtier/ {print $3}')"
[[ "$resolved" == "$libdir/"* ]] ||
  fail "pkg-config consumer loads libkvtier from '$resolved', not from $libdir"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  run_logged pkgconfig-run "$tmp/pc_consumer"
tail -n 1 "$tmp/pkgconfig-run.log" | grep -qx OK || fail "pkg-config consumer did not print OK"

run_logged pkgconfig-c-build "${CC:-cc}" -std=c11 -Wall -Wextra -pedantic -Werror \
  "${more_flags[@]}" "$consumer_src/c_consumer.c" "${pc_flags[@]}" -o "$tmp/pc_c_consumer"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  run_logged pkgconfig-c-run "$tmp/pc_c_consumer"
tail -n 1 "$tmp/pkgconfig-c-run.log" | grep -qx OK || fail "pkg-config C consumer did not print OK"

for run in run c-run; do
  if ! diff -u "$tmp/cmake-$run.log" "$tmp/pkgconfig-$run.log" >"$tmp/diff.log"; then
    cat "$tmp/diff.log" >&2
    fail "the CMake and pkg-config consumers ($run) printed different results"
  fi
done

# 4. The Python binding as installed, finding the installed library by itself.
binding="$(find "$prefix" -path '*/kvtier/python/kvtier/__init__.py' -print -quit)"
[[ -n "$binding" ]] || fail "the python/kvtier package was not installed under $prefix"
binding="$(dirname "$binding")"
if command -v python3 >/dev/null; then
  (
    unset KVTIER_LIBRARY
    export PYTHONPATH="$(dirname "$binding")"
    run_logged python-run python3 "$consumer_src/../../python/test_kvtier.py"
    loaded="$(python3 -c 'import kvtier; print(kvtier.load_library()._name)')"
    [[ "$loaded" == "$libdir/"* ]] ||
      fail "the installed Python binding loads '$loaded', not the library in $libdir"
    echo "Python binding: $binding loads $loaded" >"$tmp/python-lib.log"
  )
  tail -n 1 "$tmp/python-run.log" | grep -qx OK || fail "the installed Python binding's test failed"
else
  echo "consumer_test: python3 not found: the installed Python binding is not run"
fi

cat "$tmp/cmake-run.log" "$tmp/cmake-c-run.log"
[[ -f "$tmp/python-lib.log" ]] && cat "$tmp/python-lib.log"
echo "consumer_test: PASS (find_package and pkg-config consumers against $prefix)"
