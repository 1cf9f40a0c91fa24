#!/bin/sh
# Steps per second of `tdyn particles` (Euler with P frozen, float64) against the numpy implementation in
# tests/particles_reference.py, measured in the same run on the same machine: n = d = 128, then n = 64 ... 2048
# at d = 128. Usage: bench/particles_vs_numpy.sh [BUILD_DIR]   (default build-particles)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-particles}
py=/usr/bin/python3
[ -x "$build/bench_particles" ] || { echo "build $build/bench_particles first (ninja -C $build bench_particles)" >&2; exit 1; }
$py -c 'import numpy' 2>/dev/null || { echo "numpy is not importable by $py" >&2; exit 1; }
echo "threads: OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; nproc=$(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
json=$(mktemp)
"$build/bench_particles" --benchmark_filter='BM_ParticlesEuler' --benchmark_format=json --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true > "$json"
$py - "$json" "$root/tests/particles_reference.py" <<'PY'
import json, subprocess, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
ours = {}
for b in runs:
    if b.get("aggregate_name") == "median":
        n, d = (int(v) for v in b["run_name"].split("/")[1:3])
        ours[(n, d)] = b["steps_per_second"]
def numpy_rate(n, d):
    steps = max(3, int(2e9 / (n * n * d)))  # about half a second a round at n = d = 128: short rounds vary by 1.5x
    out = subprocess.run([sys.executable, sys.argv[2], "bench", str(n), str(d), str(steps)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["steps_per_second"]
print(f"{'n':>6} {'d':>5} {'tdyn steps/s':>14} {'numpy steps/s':>14} {'tdyn/numpy':>11}")
for (n, d) in sorted(ours, key=lambda k: (k != (128, 128), k)):
    base = numpy_rate(n, d)
    print(f"{n:>6} {d:>5} {ours[(n, d)]:>14.1f} {base:>14.1f} {ours[(n, d)] / base:>11.2f}")
PY
rm -f "$json"
