#!/usr/bin/env bash
# Installs the Debian dependencies (when missing) and builds what the commands need into ./build (Release): the
# tdyn CLI and the Python module. The tests build with scripts/test.sh, the benchmarks with -DTDYN_BUILD_BENCH=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${TDYN_SKIP_DEPS:-0}" != 1 ]; then scripts/install-deps.sh; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target programs
