#!/bin/sh
# One exact d × d sublayer Jacobian: tdyn (jacobian(): the closed form; the tangent-propagation reference is
# timed alongside) vs PyTorch autograd (torch.autograd.functional.jacobian, vectorize=True, float64) on the same random
# Llama layer (d_head 64, n_kv_heads = n_heads/2, d_mlp by Llama's rule 256 ⌈(8d/3)/256⌉); then the structured
# mean over S samples of T tokens: its cost per added sample (the slope between the smallest and largest S) as a
# multiple of one float32 forward pass of a sample, and against S per-sample torch Jacobians (extrapolated from
# torch's single-Jacobian times; its forward passes are not counted) at S = 1000. Timings: medians of 5 for the
# single Jacobians (both sides), the fastest of TDYN_BENCH_ROUNDS rounds for the forward pass and the means.
# Usage: bench/jacobian_vs_torch.sh [BUILD_DIR] [D] [S_LIST] [T]   (defaults build-jac, 512, "10 100", 128)
# TDYN_BENCH_PLAIN=1 also times the mean as S summed per-sample jacobian() calls.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-jac}
d=${2:-512}
s_list=${3:-"10 100"}
T=${4:-128}
py=/usr/bin/python3
bin=$build/jacobian_bench
"$root/bench/build.sh" "$build" jacobian_bench
$py -c 'import torch' 2>/dev/null || { echo "torch is not importable by $py" >&2; exit 1; }
echo "threads: OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; nproc=$(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
layers=2
"$bin" init "$work/model" "$d" $layers >/dev/null
ours=$("$bin" single "$work/model" "$T" 5)
theirs=$($py "$root/bench/jacobian_vs_torch.py" "$work/model" "$T" 5)
# The forward pass and the means in turn, TDYN_BENCH_ROUNDS times (default 2); the fastest of each counts, so that
# another process's burst on the shared cores does not land in one of them only.
fwd_s=$(echo "$s_list" | awk '{print $NF}')
runs=""
round=0
while [ "$round" -lt "${TDYN_BENCH_ROUNDS:-2}" ]; do
  runs="$runs $("$bin" forward "$work/model" "$fwd_s" "$T")"
  for S in $s_list; do
    runs="$runs $("$bin" mean "$work/model" "$S" "$T" structured)"
    if [ "${TDYN_BENCH_PLAIN:-0}" = 1 ]; then runs="$runs $("$bin" mean "$work/model" "$S" "$T" plain)"; fi
  done
  round=$((round + 1))
done
$py - "$ours" "$theirs" $runs <<'PY'
import json, sys
o, t = (json.loads(a) for a in sys.argv[1:3])
fastest = {}
for r in map(json.loads, sys.argv[3:]):
    key = (r["mode"], r["S"])
    if key not in fastest or r["seconds"] < fastest[key]["seconds"]:
        fastest[key] = r
f = next(r for r in fastest.values() if r["mode"] == "forward")
runs = [r for r in fastest.values() if r["mode"] != "forward"]
T = f["T"]
print(f"single Jacobian (d = {o['d_model']}, d_mlp = {o['d_mlp']}, layer 0, position {T - 1} of {T}); torch {t['torch_version']}")
for k in ("attn", "mlp"):
    print(f"  {k:5s} tdyn {o[k]['jacobian_s']*1e3:9.2f} ms  torch {t[k]['torch_s']*1e3:9.2f} ms ({t[k]['torch_threads']} threads)  "
          f"torch/tdyn {t[k]['torch_s']/o[k]['jacobian_s']:5.2f}x   (tdyn tangent propagation {o[k]['tangents_s']*1e3:9.2f} ms; "
          f"|tdyn - torch|/|torch| = {t[k]['relative_difference_to_tdyn']:.1e}, |tdyn - tangents|/|tangents| = "
          f"{o[k]['relative_difference_to_tangents']:.1e})")
forward = f["seconds"] / f["S"]
print(f"float32 forward pass of one sample ({T} tokens, 2 layers), over {f['S']} samples: {forward*1e3:.2f} ms")
structured = sorted((r for r in runs if r["mode"] == "structured"), key=lambda r: r["S"])
torch_per_sample = structured[0]["sublayers"] // 2 * (t["attn"]["torch_s"] + t["mlp"]["torch_s"])
print(f"structured mean over S samples ({T} tokens each, last position, 2 layers = 4 sublayers); "
      f"torch per sample (4 Jacobians) {torch_per_sample:.3f} s:")
for r in runs:
    line = f"  S = {r['S']:5d} {r['mode']:10s} {r['seconds']:8.2f} s (peak RSS {r['peak_rss_mib']:.0f} MiB)"
    line += f"  torch extrapolated {r['S'] * torch_per_sample:8.1f} s = {r['S'] * torch_per_sample / r['seconds']:6.1f}x"
    print(line)
if len(structured) >= 2:
    a, b = structured[0], structured[-1]
    per_sample = (b["seconds"] - a["seconds"]) / (b["S"] - a["S"])
    print(f"  per added sample (S = {a['S']} -> {b['S']}): {per_sample*1e3:.2f} ms = {per_sample/forward:.2f} x one forward pass")
    S = 1000
    ours = b["seconds"] + (S - b["S"]) * per_sample if b["S"] < S else None
    if ours is not None:
        print(f"  S = {S} (projected from S = {b['S']} at the per-sample cost): tdyn {ours:.1f} s, torch {S * torch_per_sample:.1f} s, "
              f"torch/tdyn {S * torch_per_sample / ours:.1f}x")
PY
