#!/usr/bin/env bash
# Regenerates the seed corpus fuzz/corpus/<target>/ with tdyn's own writers (fuzz/make_corpus.cpp).
# Builds its generator in the instrumented build (scripts/instrumented-build.sh); the files are small and deterministic, so they are committed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-instrumented
scripts/instrumented-build.sh make_fuzz_corpus
rm -rf fuzz/corpus
ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "$BUILD/make_fuzz_corpus" fuzz/corpus
