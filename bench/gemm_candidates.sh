#!/usr/bin/env bash
# The forward's products on the GEMM libraries tdyn could use (bench/gemm_candidates.c: OpenBLAS's cblas_sgemm, what
# tdyn calls today; oneDNN's dnnl_sgemm; oneDNN's matmul with the weights packed once), on THREADS threads each, in
# GFLOP/s and as a share of as many cores' float32 multiply-add peak (twice the float64 peak bench/fma_peak.c
# measures), with the CPU's model and vector flags: a ratio measured on one instruction set says nothing of another.
# Needs libdnnl-dev (apt-get install libdnnl-dev) and libopenblas-dev.
#   bench/gemm_candidates.sh [REPS] [THREADS]     (defaults 7, 1)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-7}
threads=${2:-1}
[ -f /usr/include/oneapi/dnnl/dnnl.h ] || { echo "oneDNN's headers are missing: apt-get install libdnnl-dev" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2046  # pkg-config's words are flags
cc -O2 -std=c11 -Wall $(pkg-config --cflags openblas) -o "$work/gemm_candidates" bench/gemm_candidates.c \
  $(pkg-config --libs openblas) -ldnnl -lm
cc -O3 -march=native -fopenmp -o "$work/fma_peak" bench/fma_peak.c
peak=$(awk -v p="$("$work/fma_peak" "$threads" 2>/dev/null)" 'BEGIN { print 2 * p }')
echo "host: $(lscpu | sed -n 's/^Model name: *//p'); vector flags: $(lscpu | grep -o -w -E 'avx512f|avx512bw|avx512vl|avx512_bf16|avx2|fma' | sort -u | tr '\n' ' ')"
echo "$threads thread(s); float32 multiply-add peak of $threads core(s): $peak GFLOP/s; best of $reps runs after a warm-up"
OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$work/gemm_candidates" "$reps" "$peak"
