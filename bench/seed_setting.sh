#!/usr/bin/env bash
# The residual-stream paper's full setting (S = 1000 passages of T = 128 tokens, every boundary of Llama 3.1 8B),
# projected from measured runs of `tdyn jacobian` on the first LAYERS layers of a random bf16 checkpoint with the
# published shapes (bench/make_seed_checkpoint.py; generated once and kept in SCRATCH):
#   - the pass's per-sample cost is the slope of its time between S_SMALL and S_LARGE samples, its per-layer cost
#     the intercept (per layer: the J̄ sums' products with the weights, which do not grow with S). The per-layer cost
#     is most of a small run's pass: between S = 4 and 16 the slope is a few seconds of it, within the runs' noise
#     (it came out 0.26 and 0.53 s per sample and layer in two rounds), hence S_LARGE = 64 by default;
#   - the metrics' per-depth cost is their time over the run's 2 × LAYERS depths (J̄_k and C_k at each).
# Beside it, the floor: S forward passes of the full model at the machine's float32 multiply-add peak (twice the
# float64 peak that bench/fma_peak.c measures on THREADS threads). Each S runs ROUNDS times, alternating, and the
# best of each is used. The CPU's model and flags are printed with the figures.
#
# Usage: [LAYERS=2] [T=128] [S_SMALL=4] [S_LARGE=64] [ROUNDS=1] [THREADS=n] [SCRATCH=/tmp/tdyn-seed-setting]
#        [TDYN=build/tdyn] bench/seed_setting.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LAYERS=${LAYERS:-2} T=${T:-128} S_SMALL=${S_SMALL:-4} S_LARGE=${S_LARGE:-64} ROUNDS=${ROUNDS:-1}
THREADS=${THREADS:-$(nproc)} SCRATCH=${SCRATCH:-/tmp/tdyn-seed-setting} TDYN=${TDYN:-$PWD/build/tdyn}
PY=/usr/bin/python3
[[ -x $TDYN ]] || { echo "seed_setting.sh: no tdyn at $TDYN (build it, or set TDYN)" >&2; exit 2; }
mkdir -p "$SCRATCH"
model=$SCRATCH/llama3.1-8b-${LAYERS}L
[[ -f $model/config.json ]] || $PY bench/make_seed_checkpoint.py --model llama3.1-8b --layers "$LAYERS" --out "$model"
cc -O3 -march=native -fopenmp -o "$SCRATCH/fma_peak" bench/fma_peak.c
peak64=$("$SCRATCH/fma_peak" "$THREADS" 2>/dev/null)

for round in $(seq "$ROUNDS"); do
  for s in $S_SMALL $S_LARGE; do
    echo "-- round $round, S = $s: tdyn --threads $THREADS jacobian ... --samples $s --min-len $T --max-len $T" >&2
    "$TDYN" --threads "$THREADS" --quiet jacobian "$model" --samples "$s" --min-len "$T" --max-len "$T" \
      --out "$SCRATCH/run-S$s-r$round"
  done
done

echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags: $(lscpu | grep -o -w -E 'avx512f|avx512bw|avx512vl|avx2|fma' | sort -u | tr '\n' ' ')"
$PY - "$SCRATCH" "$model/config.json" "$S_SMALL" "$S_LARGE" "$ROUNDS" "$T" "$peak64" "$THREADS" <<'PY'
import json, sys
scratch, config_path, s_small, s_large, rounds, T, peak64, threads = sys.argv[1:]
s_small, s_large, rounds, T, peak = int(s_small), int(s_large), int(rounds), int(T), 2 * float(peak64)
c = json.load(open(config_path))
d, d_ff, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
head = d // c["num_attention_heads"]
params = 2 * d * d + 2 * d * c["num_key_value_heads"] * head + 3 * d * d_ff  # per layer: q, o, k, v, gate, up, down
def best(s, phase):
    return min(json.load(open(f"{scratch}/run-S{s}-r{r}/results.json"))["timings"][phase] for r in range(1, rounds + 1))
pass_small, pass_large = best(s_small, "mean_jacobians"), best(s_large, "mean_jacobians")
per_sample_layer = (pass_large - pass_small) / (s_large - s_small) / L
per_layer = (pass_small - s_small * L * per_sample_layer) / L
per_depth = min(best(s_small, "metrics"), best(s_large, "metrics")) / (2 * L)
forward = 2 * params * T + 2 * T * T * d  # flops of one sample through one layer: the products, causal attention
floor_sample_layer = forward / (peak * 1e9)
print(f"float32 multiply-add peak on {threads} threads: {peak:.0f} GFLOP/s (twice fma_peak's float64)")
print(f"measured on {L} layers, T = {T}, best of {rounds} round(s):")
print(f"  pass: {pass_small:.1f} s at S = {s_small}, {pass_large:.1f} s at S = {s_large}")
print(f"  per sample and layer {per_sample_layer:.3f} s ({per_sample_layer / floor_sample_layer:.2f}x the forward floor "
      f"{floor_sample_layer:.3f} s); per layer {per_layer:.1f} s; metrics per depth {per_depth:.1f} s")
S, layers = 1000, 32
phases = {"pass, per sample": S * layers * per_sample_layer, "pass, per layer": layers * per_layer,
          "metrics, 64 depths": 2 * layers * per_depth}
total = sum(phases.values())
floor = S * layers * floor_sample_layer
print(f"projected: Llama 3.1 8B, S = {S}, T = {T}, {layers} layers, on {threads} threads")
for name, seconds in phases.items():
    print(f"  {name:20s} {seconds / 3600:7.2f} h  {100 * seconds / total:5.1f} %")
print(f"  {'total':20s} {total / 3600:7.2f} h; floor ({S} forward passes at the peak) {floor / 3600:.2f} h; "
      f"{total / floor:.2f}x the floor")
PY
