#!/usr/bin/env bash
# Builds and runs the whole test suite:
#   1. the Release build (build/: the CLI, the Python module and the tests) and every test of it under ctest: C++,
#      Python, the layering check, the report rendered in headless Chromium;
#   2. the instrumented build (build-instrumented/, scripts/instrumented-build.sh: clang, ASan + UBSan): the C++
#      tests again under the sanitizers, all but those labelled slow (tests/CMakeLists.txt says why), then a
#      short libFuzzer run of every reader.
# --quick: only the Release build and its tests less those labelled slow, for everyday iteration.
# Tests that need the shared test data read it from ../shared (or $TDYN_SHARED) and skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ ${1:-} == --quick ]]; then quick=1; fi
jobs=$(nproc)
# Each phase says how long it took, so that a slow CI run shows where its time went.
phase_start=$SECONDS
phase_done() { echo "== $1: $((SECONDS - phase_start)) s"; phase_start=$SECONDS; }

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
phase_done "release build"
if [[ $quick == 1 ]]; then
  (cd build && ctest --output-on-failure -j "$jobs" -LE '^slow$')
  phase_done "release tests (quick: all but the slow ones)"
  exit 0
fi
(cd build && ctest --output-on-failure -j "$jobs")
phase_done "release tests"

scripts/instrumented-build.sh
phase_done "instrumented build"
(cd build-instrumented && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j "$jobs" --timeout 900 -LE '^slow$')
phase_done "sanitizer tests"

scripts/fuzz-smoke.sh 2000
phase_done "fuzz smoke run"
