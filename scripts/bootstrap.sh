#!/usr/bin/env bash
# Installs the Debian dependencies (when missing) and builds tdyn into ./build (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${TDYN_SKIP_DEPS:-0}" != 1 ]; then scripts/install-deps.sh; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
