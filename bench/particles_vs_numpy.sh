#!/bin/sh
# Steps per second of `tdyn particles` (Euler with P frozen, float64) against the numpy implementation in
# tests/particles_reference.py, measured in the same run on the same machine: n = d = 128, then n = 64 ... 2048
# at d = 128. The two sides alternate for ROUNDS rounds and each keeps its best, so that both see the machine's
# good and bad stretches. Each rate is also given in GFLOP/s of its own products (tdyn: 4 n d (n + d) a step,
# numpy's formulation 2 n d (3 d + 2 n)) beside the machine's float64 multiply-add peak (bench/fma_peak.c), which
# bounds them: virtual cores that are hyperthreads of one physical core share its FMA units, and the peak of two
# threads then is that of one.
# Usage: bench/particles_vs_numpy.sh [BUILD_DIR [ROUNDS]]   (default build-particles, 3)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-particles}
rounds=${2:-3}
py=/usr/bin/python3
"$root/bench/build.sh" "$build" bench_particles
$py -c 'import numpy' 2>/dev/null || { echo "numpy is not importable by $py" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O3 -march=native -fopenmp -o "$work/fma_peak" "$root/bench/fma_peak.c"
cores=$(nproc)
peaks() { echo "$("$work/fma_peak" 1 2>/dev/null) GFLOP/s on 1 thread, $("$work/fma_peak" "$cores" 2>/dev/null) on $cores"; }
echo "threads: OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; nproc=$cores; load: $(cut -d' ' -f1-3 /proc/loadavg); best of $rounds rounds"
echo "float64 FMA peak before: $(peaks)"
$py - "$build/bench_particles" "$root/tests/particles_reference.py" "$rounds" <<'PY'
import json, subprocess, sys
bench, reference, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def tdyn_rate(n, d):
    out = subprocess.run([bench, f"--benchmark_filter=BM_ParticlesEuler/{n}/{d}/", "--benchmark_format=json",
                          "--benchmark_min_time=0.5"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["benchmarks"][0]["steps_per_second"]
def numpy_rate(n, d):
    steps = max(3, int(2e9 / (n * n * d)))  # about half a second a round at n = d = 128: short rounds vary by 1.5x
    out = subprocess.run([sys.executable, reference, "bench", str(n), str(d), str(steps)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["steps_per_second"]
print(f"{'n':>6} {'d':>5} {'tdyn steps/s':>13} {'GFLOP/s':>8} {'numpy steps/s':>14} {'GFLOP/s':>8} {'tdyn/numpy':>11}")
for n, d in [(128, 128), (64, 128), (256, 128), (512, 128), (1024, 128), (2048, 128)]:
    ours = base = 0.0
    for _ in range(rounds):
        ours, base = max(ours, tdyn_rate(n, d)), max(base, numpy_rate(n, d))
    ours_flop, base_flop = 4 * n * d * (n + d), 2 * n * d * (3 * d + 2 * n)
    print(f"{n:>6} {d:>5} {ours:>13.1f} {ours * ours_flop / 1e9:>8.1f} {base:>14.1f} {base * base_flop / 1e9:>8.1f}"
          f" {ours / base:>11.2f}", flush=True)
PY
echo "float64 FMA peak after: $(peaks)"
