#!/usr/bin/env bash
# tokens/s of `tdyn run` (greedy generation, KV cache) against the plain single-threaded C reference forward
# (bench/reference_forward.c) on the same llama2.c checkpoint and prompt, and tdyn's peak RSS against the
# model file size. Models: stories260K (../shared) and a random 41M-parameter llama2.c checkpoint.
#   bench/run_vs_reference.sh [BUILD_DIR]        (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O3 -o "$work/reference" bench/reference_forward.c -lm
/usr/bin/python3 bench/make_llama2c_model.py "$work/random41m.bin" 512 8 8 4 1376 32000 512
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, $(nproc) cores"
printf "%-14s %8s %12s %12s %8s %12s %10s %8s\n" model steps "tdyn tok/s" "ref tok/s" ratio "peak RSS MB" "file MB" "RSS/file"
measure() {  # name file steps threads
  local name=$1 file=$2 steps=$3 threads=$4
  local ref tdyn rss
  ref=$("$work/reference" "$file" "$steps" 1 2>&1 >/dev/null | sed -E 's/.*, ([0-9.]+) tok\/s/\1/')
  tdyn=$( { /usr/bin/time -f "RSS %M" "$build/tdyn" --threads "$threads" run "$file" --ids 1 --steps "$steps" \
            --context-overflow stop > /dev/null; } 2>&1 )
  rss=$(echo "$tdyn" | sed -nE 's/^RSS ([0-9]+)/\1/p')
  tdyn=$(echo "$tdyn" | sed -nE 's/.*, ([0-9.]+) tok\/s.*/\1/p')
  local mb; mb=$(du -m "$file" | cut -f1)
  awk -v n="$name" -v s="$steps" -v t="$tdyn" -v r="$ref" -v rss="$rss" -v mb="$mb" \
    'BEGIN { printf "%-14s %8s %12s %12s %8.2f %12.1f %10s %8.2f\n", n, s, t, r, t / r, rss / 1024, mb, rss / 1024 / mb }'
}
stories=../shared/models/stories260K/stories260K.bin
for threads in 1 "$(nproc)"; do
  echo "tdyn --threads $threads"
  [ -f "$stories" ] && measure stories260K "$stories" 256 "$threads"
  measure random41M "$work/random41m.bin" 256 "$threads"
done
