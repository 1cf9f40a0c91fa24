#!/usr/bin/env bash
# tdyn at the papers' model shapes: for each of Llama 3.1 8B, OLMo 3 7B and Gemma 4 E4B, a random bf16
# checkpoint with the published shapes (bench/make_seed_checkpoint.py, generated once and kept) and, for
# `tdyn info`, `tdyn run` (32 prompt ids, 8 new tokens) and `tdyn analyze`, the wall seconds and the peak
# RssAnon / RssFile of the tdyn process (bench/peak_rss.py), then a summary table.
#
# Usage: [MODELS="llama3.1-8b olmo3-7b gemma4-e4b"] [LAYERS=n] [STEPS="info run analyze"] [SCRATCH=dir]
#        [TDYN=path] [THREADS=n] [ANALYZE_SAMPLES=4] [ANALYZE_MAX_LEN=32] [ANALYZE_ARGS="..."] bench/seed_scale.sh
#
#   MODELS   shapes to measure (default: all three)
#   LAYERS   fewer layers than published (default: full depth); the checkpoint then goes to <model>-<n>L
#   STEPS    which tdyn commands to measure (default: all three)
#   SCRATCH  checkpoints, logs, analyze output and results (default /tmp/tdyn-seed): $SCRATCH/<model>[-<n>L]
#   TDYN     the binary (default: build/tdyn of this checkout)
#   THREADS  tdyn --threads (default: tdyn's own, all cores)
#   ANALYZE_SAMPLES / ANALYZE_MAX_LEN / ANALYZE_ARGS   tdyn analyze --samples / --max-len / extra flags
#   VMEM_LIMIT_GB  cap tdyn's address space (ulimit -v, GiB; it counts the mapped checkpoint too): a step that
#            needs more fails with tdyn's "out of memory" instead of the kernel's OOM killer picking a process
#
# Full depth needs disk for the three checkpoints (16.1 + 14.6 + 14.9 GB) and, with a tdyn that converts every
# weight to float32 at load, about twice the checkpoint size in RAM. A failed step is recorded with its exit code
# and log and the script goes on; it exits 1 if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
MODELS=${MODELS:-"llama3.1-8b olmo3-7b gemma4-e4b"}
STEPS=${STEPS:-"info run analyze"}
SCRATCH=${SCRATCH:-/tmp/tdyn-seed}
TDYN=${TDYN:-$REPO/build/tdyn}
ANALYZE_SAMPLES=${ANALYZE_SAMPLES:-4}
ANALYZE_MAX_LEN=${ANALYZE_MAX_LEN:-32}
PY=/usr/bin/python3
# 32 prompt ids below 50257: valid in every vocabulary here and readable with the GPT-2 tokenizer beside the model.
IDS=464,2068,7586,21831,18045,625,262,16931,3290,13,770,318,257,1332,286,262,1080,2067,1110,30,383,1578,2003,6953,287,3090,11,290,3520,340,481,1394

[[ -x $TDYN ]] || { echo "seed_scale.sh: no tdyn at $TDYN (build it, or set TDYN)" >&2; exit 2; }
mkdir -p "$SCRATCH"
THREAD_ARGS=()
[[ -n ${THREADS:-} ]] && THREAD_ARGS=(--threads "$THREADS")
RESULTS=$SCRATCH/results-$(date +%Y%m%d-%H%M%S).jsonl
failed=0

# record JSON MODEL STEP DIR: appends peak_rss.py's JSON line with the model, step and checkpoint size to RESULTS.
record() {
  $PY - "$1" "$2" "$3" "$(du -sb --apparent-size "$4" | cut -f1)" "${LAYERS:-}" >>"$RESULTS" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
r.update(model=sys.argv[2], step=sys.argv[3], checkpoint_bytes=int(sys.argv[4]), layers=sys.argv[5] or "full")
print(json.dumps(r))
PY
}

# measure MODEL STEP DIR LOG CMD...: runs CMD under peak_rss.py with its output in LOG, records the result.
measure() {
  local model=$1 step=$2 dir=$3 log=$4 json rc
  shift 4
  json=$(mktemp)
  echo "-- $model $step: $*  (log: $log)"
  (
    [[ $step != generate && -n ${VMEM_LIMIT_GB:-} ]] && ulimit -v $((VMEM_LIMIT_GB * 1024 * 1024))
    exec $PY bench/peak_rss.py --json "$json" -- "$@"
  ) >"$log" 2>&1
  rc=$?
  grep '^peak_rss:' "$log" | sed 's/^/   /'
  if [[ $rc -ne 0 ]]; then
    failed=1
    echo "   FAILED (exit $rc); the log ends:"
    grep -v '^peak_rss:\|^{"cmd"' "$log" | tail -n 3 | sed 's/^/   /'
  fi
  [[ -d $dir ]] && record "$json" "$model" "$step" "$dir"
  rm -f "$json"
  return $rc
}

for model in $MODELS; do
  dir=$SCRATCH/$model
  layer_args=()
  if [[ -n ${LAYERS:-} ]]; then
    dir=$SCRATCH/$model-${LAYERS}L
    layer_args=(--layers "$LAYERS")
  fi
  if [[ -f $dir/seed_checkpoint.json ]]; then
    echo "== $model: using $dir"
  else
    echo "== $model: generating $dir"
    measure "$model" generate "$dir" "$dir.generate.log" \
      $PY bench/make_seed_checkpoint.py --model "$model" "${layer_args[@]}" --out "$dir" || continue
  fi
  # The checkpoint found must be the one asked for.
  if ! $PY - "$dir/seed_checkpoint.json" "$model" "${LAYERS:-}" <<'PY'
import json, sys
info = json.load(open(sys.argv[1]))
want = int(sys.argv[3]) if sys.argv[3] else info["published_layers"]
if info["model"] != sys.argv[2] or info["layers"] != want:
    sys.exit(f"seed_scale.sh: {sys.argv[1]} is {info['model']} with {info['layers']} layers, not {sys.argv[2]} with {want}")
PY
  then
    failed=1
    continue
  fi

  for step in $STEPS; do
    case $step in
      info) args=(info "$dir") ;;
      run) args=(run "$dir" --ids "$IDS" --max-new-tokens 8) ;;
      analyze)
        rm -rf "$dir.analyze"
        # shellcheck disable=SC2206  # ANALYZE_ARGS is split into words on purpose
        args=(analyze "$dir" --samples "$ANALYZE_SAMPLES" --max-len "$ANALYZE_MAX_LEN" --out "$dir.analyze" ${ANALYZE_ARGS:-}) ;;
      *) echo "seed_scale.sh: unknown step '$step' (info, run, analyze)" >&2; exit 2 ;;
    esac
    measure "$model" "$step" "$dir" "$dir.$step.log" "$TDYN" "${THREAD_ARGS[@]}" "${args[@]}"
  done
done

echo
echo "results: $RESULTS"
[[ -f $RESULTS ]] && $PY - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'model':<12} {'layers':>6} {'ckpt GB':>8} {'step':<9} {'exit':>4} {'wall s':>8} {'RssAnon MiB':>12} "
      f"{'RssFile MiB':>12} {'maxrss MiB':>11}")
for r in rows:
    print(f"{r['model']:<12} {r['layers']:>6} {r['checkpoint_bytes'] / 1e9:>8.2f} {r['step']:<9} {r['exit_code']:>4} "
          f"{r['wall_s']:>8.1f} {r['peak_rss_anon_mib']:>12.0f} {r['peak_rss_file_mib']:>12.0f} "
          f"{r['maxrss_wait4_mib']:>11.0f}")
PY
exit $failed
