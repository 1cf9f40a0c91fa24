#!/usr/bin/env bash
# Builds and runs the whole test suite: the Release build under ctest (C++ and Python tests), then the C++
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/; all but release_only below), then
# a short libFuzzer smoke run of every reader (build-fuzz/, clang).
# Tests that need the shared test data read it from ../shared (or $TDYN_SHARED) and skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Each phase says how long it took, so that a slow CI run shows where its time went.
phase_start=$SECONDS
phase_done() { echo "== $1: $((SECONDS - phase_start)) s"; phase_start=$SECONDS; }
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
phase_done "release build"
(cd build && ctest --output-on-failure -j "$jobs")
phase_done "release tests"

# -O0 with line tables: it compiles several times faster than an optimised build, and the tests run on small
# models, so the whole suite still takes only minutes under the sanitizers.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" -DTDYN_SANITIZE=ON \
  -DTDYN_BUILD_BENCH=OFF -DTDYN_PYTHON=OFF >/dev/null
cmake --build build-asan --target tdyn tdyn_tests
phase_done "sanitizer build"
# A few tests repeat at scale what smaller tests check: whole analyses of a real model (a killed and resumed
# one, one shared pass against each part's own), every command run three ways, thousands of tokenized passages,
# a report rendered in Chromium. At -O0 under the sanitizers they took over half of this phase, and every code
# path they take also runs here in the smaller tests of the same parts, so they run once, in the Release suite.
release_only='^(report_renders_in_chromium|Analyze\.Stories260KEndToEnd|PassCli\.KilledAndResumed.*|'\
'PassCli\.AnalyzeSharesOnePassWithThePartsOwnResults|GgufTokenizer\.LlamaIdsEqualLlama2cRunC|'\
'GlobalFlags\.QuietSilencesProgressBeforeOrAfterTheCommand)$'
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j "$jobs" --timeout 900 -E "$release_only")
phase_done "sanitizer tests"

scripts/fuzz-smoke.sh 2000
phase_done "fuzz build and smoke run"
