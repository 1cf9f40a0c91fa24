#!/usr/bin/env bash
# Runs every analysis command with two tdyn executables (e.g. the previous commit's build and this one) on the shared
# models and compares what they write, file by file: arrays, tables and checkpoints byte for byte, results.json
# less the run's own paths, command lines, start times and timings (scripts/compare_results.py). A refactoring that
# must not change any number passes it; the last line says how many files were compared and how many differ.
#   scripts/compare-builds.sh BEFORE_TDYN AFTER_TDYN [WORK_DIR [--rtol R [--atol A]]]   (WORK_DIR/before, /after: replaced)
# With --rtol, files whose numbers agree to that tolerance are listed apart, with their worst number
# (scripts/compare_results.py): for a change that may move results by round-off.
# One thread each, so that BLAS sums in the same order. Needs ../shared (or $TDYN_SHARED) with stories260K,
# the llama, albert, bert, olmo3 and gemma4 fixtures (one family per norm placement) and WikiText-2.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,8p "$0" >&2; exit 2; }
before=$(realpath "$1") after=$(realpath "$2")
work=${3:-$(mktemp -d)}
# Runs of an earlier call (perhaps with another list of runs) would be compared as if they were this call's.
rm -rf "$work/before" "$work/after"
mkdir -p "$work"
shared=${TDYN_SHARED:-$(realpath ../shared)}
stories=$shared/models/stories260K/stories260K.bin
corpus=$shared/data/wikitext-2/wiki.test.raw
fixtures=$shared/fixtures
for f in "$stories" "$corpus" "$fixtures"/{llama,albert,bert,olmo3,gemma4}; do
  [ -e "$f" ] || { echo "compare-builds: $f is missing (set TDYN_SHARED)" >&2; exit 2; }
done
inputs="--data $corpus --samples 12 --max-len 24"
runs=(
  "analyze $stories $inputs --particles-tokens 8 --particles-T 2"
  "power $stories $inputs --save-matrices --iterate-layer 2 --iterations 40 --steer-scales 0,1,100"
  "power $fixtures/albert --ids 2,14,9,31,7,22,3 --mode attn-only-l2 --no-residual --steer token:5"
  "jacobian $stories $inputs --surgery --cumulative both --positions all"
  "jacobian $fixtures/llama --ids 1,5,9,12,7,3,2 --min-len 1 --compare $fixtures/llama"
  "jacobian $fixtures/gemma4 --ids 2,14,9,31,7,22,3 --min-len 1 --cumulative both --positions all"
  "jacobian $fixtures/olmo3 --ids 2,14,9,31,7,22,3 --min-len 1 --positions all --ablate blocks.0.hook_mlp_out"
  "jacobian $fixtures/bert --ids 2,14,9,31,7,22,3 --min-len 1 --positions all --ablate blocks.1.attn.hook_z:heads=0"
  "power $fixtures/olmo3 --ids 2,14,9,31,7,22,3 --no-residual"
  "power $fixtures/gemma4 --ids 2,14,9,31,7,22,3"
  "topology $stories $inputs --gamma-scan 0.02,0.1 --save-correlations --save-jacobians --random-init"
  "particles --preset polytope"
  "particles --from-model $stories --layer 1 --head 2 --data $corpus --n 12 --T 3"
)
for i in "${!runs[@]}"; do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    # shellcheck disable=SC2086  # the run's words are its arguments
    "$bin" --threads 1 --quiet ${runs[$i]} --out "$work/$side/$i" > "$work/$side.$i.log" 2>&1 ||
      { echo "compare-builds: '$side' failed on: tdyn ${runs[$i]} (log: $work/$side.$i.log)" >&2; exit 1; }
  done
done
/usr/bin/python3 scripts/compare_results.py "$work/before" "$work/after" "${@:4}"
