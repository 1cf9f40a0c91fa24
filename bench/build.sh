#!/bin/sh
# Builds benchmark programs for the bench/ scripts: configures BUILD_DIR (Release, benchmarks on, tests off) when it
# is new, turns the benchmarks on in an existing tree, and builds the TARGETs.
# Usage: bench/build.sh BUILD_DIR TARGET...
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1
shift
if [ -f "$build/CMakeCache.txt" ]; then
  cmake "$build" -DTDYN_BUILD_BENCH=ON >/dev/null
else
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTDYN_BUILD_BENCH=ON -DTDYN_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build" --target "$@" >"$build/bench-build.log" 2>&1 || { tail -n 40 "$build/bench-build.log"; exit 1; }
