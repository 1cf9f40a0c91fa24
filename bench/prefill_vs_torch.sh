#!/usr/bin/env bash
# Prefill tokens/s of tdyn's forward pass (bench_forward) against a PyTorch float32 CPU forward of the same
# llama2.c checkpoint (bench/torch_llama2c_forward.py), measured in the same run: one thread each, then each side's
# best setting on this machine's cores (PyTorch: every split of intra-op threads × OpenBLAS threads, with OpenMP's
# default spinning waits, passive ones, and tdyn's short spin). tdyn runs with GOMP_SPINCOUNT=1000, as the tdyn
# program sets for itself: long-spinning waiters take the core the other thread needs on a small machine.
# Model: random, 12 layers, d = 768, 12 heads, SwiGLU 2048, vocab 512 (bench/make_llama2c_model.py).
# Each setting is first measured once (the median of REPEATS passes) to find each side's best; then the four rates
# reported (one thread each, each side's best) are measured again in turn, ROUNDS times, and the fastest of each
# counts. A single pick among the PyTorch settings (eleven on two cores) would be the luckiest of eleven draws
# on a noisy machine against one of tdyn's; the rounds give both sides as many draws at the same stretches of time.
# Each rate is also given in GFLOP/s (2 multiply-add flops per weight and token, plus causal attention's QKᵀ and AV)
# and as a share of the machine's float32 multiply-add peak on as many threads (twice the float64 peak that
# bench/fma_peak.c measures), with the CPU's model and vector flags: a ratio measured on one instruction set says
# nothing of another. On an AVX-512 host the share of the AVX2 peak follows: the bound of code built for AVX2, such as
# OpenBLAS's Haswell kernels (OPENBLAS_CORETYPE=Haswell), which is what an AVX2 host runs (where the AVX2 peak is the
# machine's).
#   bench/prefill_vs_torch.sh [BUILD_DIR] [TOKENS] [REPEATS] [ROUNDS]     (defaults build, 256, 5, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tokens=${2:-256}
repeats=${3:-5}
rounds=${4:-3}
py=/usr/bin/python3
bench/build.sh "$build" bench_forward
$py -c 'import torch' 2>/dev/null || { echo "torch is not importable by $py (apt-get install python3-torch)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$work/llama-d768.bin
dim=768 layers=12 heads=12 kv_heads=12 hidden=2048 vocab=512
$py bench/make_llama2c_model.py "$model" $dim $layers $heads $kv_heads $hidden $vocab 512
cores=$(nproc)
echo "T = $tokens, median of $repeats, best of $rounds rounds; $cores cores; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; load $(cut -d' ' -f1-3 /proc/loadavg)"

tdyn_rate() {  # threads
  GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000} OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 "$build/bench_forward" "$model" "$tokens" "$repeats" "$1" |
    sed -nE 's/^prefill_tok_s (.*)/\1/p'
}
torch_rate() {  # intra-op threads, BLAS threads, OpenMP wait setting (empty: the default)
  env ${3:+$3} OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$2 $py bench/torch_llama2c_forward.py "$model" "$tokens" "$repeats" "$1"
}
best() { printf "%s\n" "$@" | sort -g | tail -1; }

# Choosing: every setting once.
tdyn1=$(tdyn_rate 1)
torch1=$(torch_rate 1 1)
tdyn_best=$tdyn1 tdyn_threads=1 torch_best=$torch1 torch_setting=(1 1 "")
for t in $(seq 2 "$cores"); do
  rate=$(tdyn_rate "$t")
  [ "$(best "$rate" "$tdyn_best")" = "$rate" ] && tdyn_best=$rate tdyn_threads=$t
done
for wait in "" OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=1000; do
  for intra in $(seq 1 "$cores"); do
    for blas in $(seq 1 "$cores"); do
      [ "$intra$blas$wait" = 11 ] && continue
      rate=$(torch_rate "$intra" "$blas" "$wait")
      [ "$(best "$rate" "$torch_best")" = "$rate" ] && torch_best=$rate torch_setting=("$intra" "$blas" "$wait")
    done
  done
done
# Measuring: the chosen settings in turn, ROUNDS more times each.
for round in $(seq "$rounds"); do
  tdyn1=$(best "$tdyn1" "$(tdyn_rate 1)")
  torch1=$(best "$torch1" "$(torch_rate 1 1)")
  tdyn_best=$(best "$tdyn_best" "$(tdyn_rate "$tdyn_threads")")
  torch_best=$(best "$torch_best" "$(torch_rate "${torch_setting[@]}")")
done
[ "$tdyn_threads" = 1 ] && tdyn_best=$tdyn1
[ "${torch_setting[*]}" = "1 1 " ] && torch_best=$torch1
torch_setting="${torch_setting[0]} × ${torch_setting[1]}${torch_setting[2]:+ ${torch_setting[2]}}"
printf "%-56s %12s %14s %8s\n" setting "tdyn tok/s" "torch tok/s" ratio
awk -v a="$tdyn1" -v b="$torch1" 'BEGIN { printf "%-56s %12.1f %14.1f %8.2f\n", "one thread each", a, b, a / b }'
awk -v a="$tdyn_best" -v b="$torch_best" -v t="$tdyn_threads" -v s="$torch_setting" \
  'BEGIN { printf "%-56s %12.1f %14.1f %8.2f\n", "best: tdyn " t " threads, torch " s, a, b, a / b }'
awk -v a="$tdyn_best" -v b="$tdyn1" 'BEGIN { printf "tdyn best / tdyn one thread: %.2f\n", a / b }'

# The same rates as arithmetic: GFLOP/s against the float32 FMA peak on as many threads.
cc -O3 -march=native -fopenmp -o "$work/fma_peak" bench/fma_peak.c
cc -O3 -mavx2 -mfma -DFMA_BYTES=32 -fopenmp -o "$work/fma_peak_avx2" bench/fma_peak.c
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; vector flags: $(lscpu | grep -o -w -E 'avx512f|avx512bw|avx512vl|avx512_bf16|avx2|fma' | sort -u | tr '\n' ' ')"
avx512=$(grep -q -w avx512f /proc/cpuinfo && echo yes || true)
torch_threads=$(awk '{ print ($1 > $3 ? $1 : $3) }' <<<"$torch_setting")  # "INTRA × BLAS [wait]": the cores it used
for row in "tdyn, one thread|$tdyn1|1" "torch, one thread|$torch1|1" "tdyn, $tdyn_threads threads|$tdyn_best|$tdyn_threads" \
           "torch, $torch_setting|$torch_best|$torch_threads"; do
  IFS='|' read -r what rate threads <<<"$row"
  peak=$(awk -v p="$("$work/fma_peak" "$threads" 2>/dev/null)" 'BEGIN { print 2 * p }')
  peak_avx2=$([ -n "$avx512" ] && awk -v p="$("$work/fma_peak_avx2" "$threads" 2>/dev/null)" 'BEGIN { print 2 * p }' || true)
  awk -v what="$what" -v rate="$rate" -v peak="$peak" -v peak_avx2="$peak_avx2" -v t="$tokens" -v d=$dim -v L=$layers \
      -v h=$heads -v kv=$kv_heads -v ff=$hidden -v V=$vocab 'BEGIN {
    weights = L * (2 * d * d + 2 * d * d * kv / h + 3 * d * ff) + d * V
    flops = 2 * weights + L * 2 * t * d  # per token: the products, and causal attention averaged over the T positions
    gflops = rate * flops / 1e9
    printf "%-40s %8.1f GFLOP/s, %5.1f %% of the float32 peak %.0f GFLOP/s", what, gflops, 100 * gflops / peak, peak
    if (peak_avx2 != "") printf ", %5.1f %% of the AVX2 one %.0f GFLOP/s", 100 * gflops / peak_avx2, peak_avx2
    printf "\n" }'
done
