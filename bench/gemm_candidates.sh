#!/usr/bin/env bash
# The forward's products on the GEMM libraries tdyn could use (bench/gemm_candidates.c: OpenBLAS's cblas_sgemm, what
# tdyn calls today; oneDNN's dnnl_sgemm; oneDNN's matmul with the weights packed once), one thread each, in GFLOP/s
# and as a share of the core's float32 multiply-add peak (twice the float64 peak bench/fma_peak.c measures), with the
# CPU's model and vector flags: a ratio measured on one instruction set says nothing of another.
# Needs libdnnl-dev (apt-get install libdnnl-dev) and libopenblas-dev.
#   bench/gemm_candidates.sh [REPS]     (default 7)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-7}
[ -f /usr/include/oneapi/dnnl/dnnl.h ] || { echo "oneDNN's headers are missing: apt-get install libdnnl-dev" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2046  # pkg-config's words are flags
cc -O2 -std=c11 -Wall $(pkg-config --cflags openblas) -o "$work/gemm_candidates" bench/gemm_candidates.c \
  $(pkg-config --libs openblas) -ldnnl -lm
cc -O3 -march=native -fopenmp -o "$work/fma_peak" bench/fma_peak.c
peak=$(awk -v p="$("$work/fma_peak" 1 2>/dev/null)" 'BEGIN { print 2 * p }')
echo "host: $(lscpu | sed -n 's/^Model name: *//p'); vector flags: $(lscpu | grep -o -w -E 'avx512f|avx512bw|avx512vl|avx512_bf16|avx2|fma' | sort -u | tr '\n' ' ')"
echo "one thread; float32 multiply-add peak of one core: $peak GFLOP/s; best of $reps runs after a warm-up"
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$work/gemm_candidates" "$reps" "$peak"
