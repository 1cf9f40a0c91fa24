#!/usr/bin/env bash
# Long fuzzing run: every target for RUNS executions (default 10^7) or MAX_SECONDS seconds (default: no limit),
# JOBS targets at a time (default 2, one per core). Prints executions, speed and crashes per target; crashing
# inputs land in build-instrumented/long/artifacts/<target>/ (add each to tests/data/corrupt/<target>/ once fixed).
# The corpus grows in build-instrumented/long/fuzz-work/<target>/. The targets are those of the instrumented build
# (scripts/instrumented-build.sh), the same objects the smoke run and the sanitizer tests use.
#
# Usage: [JOBS=N] [MAX_SECONDS=S] bench/fuzz-long.sh [RUNS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10000000}
shift || true
MAX_SECONDS=${MAX_SECONDS:-0}
TARGETS=${*:-$(cd fuzz && ls fuzz_*.cpp | sed 's/^fuzz_//; s/\.cpp$//')}
scripts/instrumented-build.sh $(for t in $TARGETS; do echo fuzz_$t; done) || exit 1
BUILD=build-instrumented/long
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

run_one() {
  local name=$1 work=$BUILD/fuzz-work/$1
  mkdir -p "$work" "$BUILD/artifacts/$name"
  # -fork keeps going after a crash, so one bug does not hide the next; each crash is one artifact.
  build-instrumented/fuzz_$name -runs="$RUNS" -max_total_time="$MAX_SECONDS" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -max_len=16384 \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$BUILD/artifacts/$name/" "$work" "fuzz/corpus/$name" >"$work.log" 2>&1
}
start=$SECONDS
printf '%s\n' $TARGETS | xargs -P "${JOBS:-2}" -I{} bash -c "$(declare -f run_one); BUILD=$BUILD RUNS=$RUNS MAX_SECONDS=$MAX_SECONDS run_one {}"
echo "target              executions    exec/s  crashes  (total $((SECONDS - start)) s)"
for name in $TARGETS; do
  log=$BUILD/fuzz-work/$name.log
  # The last status line "#N: cov ... exec/s S ..." (fork mode) holds the total executions and the speed.
  execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  speed=$(grep -oE 'exec/s:? *[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  crashes=$(ls "$BUILD/artifacts/$name" 2>/dev/null | wc -l)
  printf '%-18s %12s %9s %8s\n' "$name" "${execs:-0}" "${speed:--}" "$crashes"
done
