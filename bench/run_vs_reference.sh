#!/usr/bin/env bash
# Greedy decoding speed of `tdyn run` (one token a step with a KV cache) against
#   * the plain single-threaded C forward loop (bench/reference_forward.c, built -Ofast -march=native) on the same
#     llama2.c checkpoint, and
#   * the memory-bandwidth bound: every weight byte is read once per token, so no decoder can beat
#     (read bandwidth measured now, bench/read_bandwidth.c) ÷ (weight bytes per token);
# for a random 12-layer d = 768 Llama (SwiGLU 2048, vocab 512) in float32 (llama2.c .bin) and the same model in
# bfloat16 (Hugging Face directory), plus stories260K from ../shared when present. Also tdyn's peak RSS.
# Every rate is the best of ROUNDS runs, as the bandwidth is the best of its passes: on a shared or virtual machine
# a run that lost its core for a while says little about either side, and the best of each measures both alike.
#   bench/run_vs_reference.sh [BUILD_DIR] [STEPS] [ROUNDS]        (defaults build, 128, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-128}
rounds=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -Ofast -march=native -o "$work/reference" bench/reference_forward.c -lm
cc -O3 -march=native -ffast-math -fopenmp -o "$work/read_bandwidth" bench/read_bandwidth.c
/usr/bin/python3 bench/make_llama2c_model.py "$work/llama-d768.bin" 768 12 12 12 2048 512 512 "$work/llama-d768-bf16"
cores=$(nproc)
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, $cores cores, $steps steps, best of $rounds runs, load $(cut -d' ' -f1-3 /proc/loadavg)"

best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "-" || b + 0 > a + 0) ? b : a }'; }  # the larger; "-" is none yet

measure() {  # name model bytes-per-parameter threads [llama2.c file for the C reference]
  local name=$1 model=$2 bytes=$3 threads=$4 bin=${5:-}
  local params bandwidth ref=- out rate=0 rss=0 round
  params=$("$build/tdyn" info "$model" | sed -nE 's/^parameters +([0-9]+).*/\1/p')
  bandwidth=$("$work/read_bandwidth" "$threads" 2>/dev/null)
  for round in $(seq "$rounds"); do  # the two sides alternate, so that both see the machine's good and bad stretches
    if [ -n "$bin" ] && [ "$threads" = 1 ]; then
      ref=$(best "$ref" "$("$work/reference" "$bin" "$steps" 1 2>&1 >/dev/null | sed -E 's/.*, ([0-9.]+) tok\/s/\1/')")
    fi
    out=$( { OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads /usr/bin/time -f "RSS %M" \
             "$build/tdyn" --threads "$threads" run "$model" --ids 1 --max-new-tokens "$steps" --context-overflow stop \
             > /dev/null; } 2>&1 )
    rate=$(best "$rate" "$(echo "$out" | sed -nE 's/.*, ([0-9.]+) tok\/s.*/\1/p')")
    rss=$(best "$rss" "$(echo "$out" | sed -nE 's/^RSS ([0-9]+)/\1/p')")
  done
  awk -v n="$name" -v t="$threads" -v r="$rate" -v ref="$ref" -v p="$params" -v b="$bytes" -v bw="$bandwidth" -v rss="$rss" \
    'BEGIN { bound = bw * 1e9 / (p * b); cached = p * b < 64e6;  # a model this small stays in the caches
             printf "%-16s %7s %10.1f %10s %8s %10s %9s %9.1f %9.1f\n", n, t, r, ref,
                    ref == "-" ? "-" : sprintf("%.2f", r / ref), cached ? "-" : sprintf("%.1f", bound),
                    cached ? "-" : sprintf("%.0f%%", 100 * r / bound), bw, rss / 1024 }'
}
printf "%-16s %7s %10s %10s %8s %10s %9s %9s %9s\n" model threads "tdyn tok/s" "C tok/s" "tdyn/C" "bound" "of bound" \
  "GB/s" "RSS MB"
stories=../shared/models/stories260K/stories260K.bin
for threads in 1 "$cores"; do
  [ -f "$stories" ] && measure stories260K "$stories" 4 "$threads" "$stories"
  measure d768-f32 "$work/llama-d768.bin" 4 "$threads" "$work/llama-d768.bin"
  measure d768-bf16 "$work/llama-d768-bf16" 2 "$threads"
done
echo "bound = read bandwidth ÷ (parameters × bytes per parameter): every weight is read once per token"
