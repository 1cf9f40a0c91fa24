#!/usr/bin/env bash
# Regenerates the seed corpus fuzz/corpus/<target>/ with tdyn's own writers (fuzz/make_corpus.cpp).
# Needs the fuzz build (see fuzz/README.md); the files are small and deterministic, so they are committed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-fuzz}
ninja -C "$BUILD" -j"${JOBS:-2}" make_fuzz_corpus >/dev/null
rm -rf fuzz/corpus
ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "$BUILD/make_fuzz_corpus" fuzz/corpus
