#!/usr/bin/env bash
# Fuzz smoke run for CI: builds the libFuzzer targets in the instrumented build (scripts/instrumented-build.sh:
# clang, ASan + UBSan, build-instrumented/) and runs each on its seed corpus plus RUNS mutations or SECONDS seconds,
# whichever ends first. Fails on the first crash, sanitizer report or timeout; the offending input is left in
# build-instrumented/artifacts/<target>/.
#
# Usage: scripts/fuzz-smoke.sh [RUNS_PER_TARGET] [SECONDS_PER_TARGET]   (defaults 20000 and 10)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-20000}
SECONDS_PER_TARGET=${2:-10}
BUILD=build-instrumented
TARGETS=$(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')
scripts/instrumented-build.sh $TARGETS
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1
start=$SECONDS
for t in $TARGETS; do
  name=${t#fuzz_}
  work=$BUILD/fuzz-work/$name
  mkdir -p "$work" "$BUILD/artifacts/$name"
  # The corpus in the repository is only read: new inputs go to the scratch directory listed first.
  if ! $BUILD/$t -runs="$RUNS" -max_total_time="$SECONDS_PER_TARGET" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -artifact_prefix="$BUILD/artifacts/$name/" "$work" "fuzz/corpus/$name" >"$work.log" 2>&1; then
    echo "FAIL $name (log: $work.log)"; tail -n 40 "$work.log"; exit 1
  fi
  printf 'ok   %-18s %8s runs\n' "$name" "$(grep -oE '^#[0-9]+' "$work.log" | tail -1 | tr -d '#')"
done
echo "fuzz smoke: all targets passed in $((SECONDS - start)) s"
