#!/bin/sh
# One exact d × d sublayer Jacobian: tdyn (batched JVPs, and the structured form made dense) vs PyTorch autograd
# (torch.autograd.functional.jacobian, vectorize=True, float64) on the same random Llama layer, d = 512 by default;
# then the mean over S samples: tdyn structured vs S per-sample Jacobians (tdyn plain path; torch extrapolated from
# its single-Jacobian time), and peak memory vs S.
# Usage: bench/jacobian_vs_torch.sh [BUILD_DIR] [D] [S_LIST]   (defaults build-jac, 512, "10 100 1000")
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-jac}
d=${2:-512}
s_list=${3:-"10 100 1000"}
py=/usr/bin/python3
bin=$build/jacobian_bench
[ -x "$bin" ] || { echo "build $bin first (ninja -C $build jacobian_bench)" >&2; exit 1; }
$py -c 'import torch' 2>/dev/null || { echo "torch is not importable by $py" >&2; exit 1; }
echo "threads: OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; nproc=$(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
T=32
"$bin" init "$work/model" "$d" 2 >/dev/null
ours=$("$bin" single "$work/model" $T 5)
theirs=$($py "$root/bench/jacobian_vs_torch.py" "$work/model" $T 5)
echo "single Jacobian (d = $d, layer 0, position $((T - 1)) of $T):"
$py - "$ours" "$theirs" <<'PY'
import json, sys
o, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"  torch {t['torch_version']} threads {t['torch_threads']}")
for k in ("attn", "mlp"):
    print(f"  {k:5s} tdyn JVP {o[k]['plain_jvp_s']*1e3:8.2f} ms  tdyn structured {o[k]['structured_dense_s']*1e3:8.2f} ms  "
          f"torch {t[k]['torch_s']*1e3:8.2f} ms  torch/tdyn {t[k]['torch_s']/o[k]['plain_jvp_s']:6.1f}x  "
          f"|tdyn - torch|/|torch| = {t[k]['relative_difference_to_tdyn']:.1e}")
PY
echo "mean over S samples ($T tokens each, last position, 2 layers = 4 sublayers):"
for S in $s_list; do
  a=$("$bin" mean "$work/model" "$S" $T structured)
  if [ "$S" -le 100 ] || [ "${TDYN_BENCH_PLAIN_ALL:-0}" = 1 ]; then b=$("$bin" mean "$work/model" "$S" $T plain); else b=""; fi
  $py - "$a" "$b" "$theirs" <<'PY'
import json, sys
a = json.loads(sys.argv[1]); b = json.loads(sys.argv[2]) if sys.argv[2] else None; t = json.loads(sys.argv[3])
torch_s = a["S"] * 2 * (t["attn"]["torch_s"] + t["mlp"]["torch_s"])
line = f"  S = {a['S']:5d}: structured {a['seconds']:8.2f} s (peak RSS {a['peak_rss_mib']:.0f} MiB)"
if b:
    line += f"  plain {b['seconds']:8.2f} s (peak RSS {b['peak_rss_mib']:.0f} MiB)  plain/structured {b['seconds']/a['seconds']:6.1f}x"
line += f"  torch per-sample (extrapolated) {torch_s:8.1f} s = {torch_s/a['seconds']:6.1f}x structured"
d = a["d_model"]; line += f"; storing S per-sample Jacobians would take {a['S']*a['sublayers']*d*d*8/2**20:.0f} MiB"
print(line)
PY
done
