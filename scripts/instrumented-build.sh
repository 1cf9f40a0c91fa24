#!/usr/bin/env bash
# The instrumented build in build-instrumented/: clang, ASan + UBSan and libFuzzer's coverage hooks in every object,
# so that one build serves both the sanitizer test run and the fuzz targets (scripts/test.sh, scripts/fuzz-smoke.sh).
# Debug, so Eigen's and the library's assertions are on, at -O1 (TDYN_INSTRUMENT_OPT). Measured on 2 cores against
# -O0: the build takes 10.1 min against 7.3 and the sanitizer tests 2.8 min against 5.1, about even from an empty
# ccache, but from a warm one only the tests are left, and the fuzz targets run several times more inputs per second.
#
# Usage: scripts/instrumented-build.sh [TARGET...]   (default: tdyn, tdyn_tests and every fuzz target)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-instrumented
if [[ ! -f $BUILD/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="${TDYN_INSTRUMENT_OPT:--O1} -gline-tables-only" -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" \
    -DTDYN_FUZZ=ON -DTDYN_PYTHON=OFF -DTDYN_BUILD_BENCH=OFF >/dev/null
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(tdyn tdyn_tests $(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//'))
fi
# The compile lines would drown the log; a failed build shows its end.
if ! cmake --build $BUILD --target "${targets[@]}" >$BUILD/build.log 2>&1; then
  echo "instrumented build failed ($BUILD/build.log):"; tail -n 60 $BUILD/build.log; exit 1
fi
