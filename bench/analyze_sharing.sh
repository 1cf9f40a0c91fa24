#!/usr/bin/env bash
# What the shared forward pass saves: `tdyn analyze` (one pass over the samples for power, jacobian and topology)
# against the baseline of the same three parts run on their own (each running every sample itself), same model,
# samples and thread count, in the same run, alternating, best of REPEATS (default 3: a shared machine is noisy).
# Also the pass split over 2 MPI ranks when mpirun is available.
#
# Usage: [REPEATS=N] bench/analyze_sharing.sh [MODEL] [SAMPLES] [THREADS]
#        (default: ../shared/models/llama2xs/model.bin, 200, 1)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-../shared/models/llama2xs/model.bin}
SAMPLES=${2:-200}
THREADS=${3:-1}
TDYN=build/tdyn
DATA=$(dirname "$0")/../../shared/data/wikitext-2/wiki.test.raw
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
inputs=("$MODEL" --data "$DATA" --samples "$SAMPLES")
seconds() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
least() { printf '%s\n' "$@" | sort -g | head -1; }

alone_runs=() shared_runs=()
for _ in $(seq "${REPEATS:-3}"); do
  alone_runs+=("$(seconds bash -c "$TDYN --threads $THREADS -q power ${inputs[*]} --out $OUT/power &&
    $TDYN --threads $THREADS -q jacobian ${inputs[*]} --surgery --out $OUT/jacobian &&
    $TDYN --threads $THREADS -q topology ${inputs[*]} --out $OUT/topology")")
  rm -rf "$OUT/all"
  shared_runs+=("$(seconds $TDYN --threads "$THREADS" -q analyze "${inputs[@]}" --skip particles --out "$OUT/all")")
done
alone=$(least "${alone_runs[@]}")
shared=$(least "${shared_runs[@]}")
pass=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/all/results.json'))['timings']['forward_pass'])")
echo "model $MODEL, $SAMPLES samples, $THREADS thread(s)"
printf 'parts alone (baseline):       %7.2f s\n' "$alone"
printf 'analyze, one shared pass:     %7.2f s  (%.2fx the baseline; the pass itself %.2f s)\n' "$shared" "$(echo "$shared / $alone" | bc -l)" "$pass"
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  rm -rf "$OUT/mpi"
  mpi=$(seconds mpirun -np 2 $TDYN --threads "$THREADS" -q analyze "${inputs[@]}" --skip particles --out "$OUT/mpi")
  pass2=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/mpi/results.json'))['timings']['forward_pass'])")
  printf 'analyze on 2 MPI ranks:       %7.2f s  (the pass %.2f s: %.2fx the 1-rank pass)\n' "$mpi" "$pass2" "$(echo "$pass2 / $pass" | bc -l)"
fi
