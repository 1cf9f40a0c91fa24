#!/usr/bin/env bash
# The sample pass at scale: runs `tdyn jacobian MODEL` (S samples of T tokens, the structured mean over the shared
# layer-major pass) and reports the pass's wall seconds and the process's peak RssAnon, then stops the command
# where the pass ends and the metrics begin (at d = 4096 the metrics take minutes per matrix; they are measured by
# build/bench_operator_metrics). Run it on checkpoints of one width and different depths (bench/seed_scale.sh
# writes them, LAYERS=n) to see that the pass's memory does not depend on the depth.
#
# Usage: bench/pass_memory.sh MODEL [SAMPLES=4] [MAX_LEN=32]   (TDYN=path to use another binary)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
model=${1:?usage: bench/pass_memory.sh MODEL [SAMPLES] [MAX_LEN]}
samples=${2:-4}
max_len=${3:-32}
tdyn=${TDYN:-$PWD/build/tdyn}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s.%N)
"$tdyn" jacobian "$model" --samples "$samples" --max-len "$max_len" --out "$out/run" >"$out/log" 2>&1 &
pid=$!
peak=0
finished=""
while kill -0 "$pid" 2>/dev/null; do
  anon=$(awk '/^RssAnon/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  [[ -n $anon && $anon -gt $peak ]] && peak=$anon
  if grep -q "metrics of" "$out/log"; then
    finished=$(date +%s.%N)
    kill "$pid"
    break
  fi
  sleep 0.2
done
if [[ -z $finished ]]; then
  echo "pass_memory.sh: tdyn ended before the pass finished:" >&2
  cat "$out/log" >&2
  exit 1
fi
echo "$model: pass of $samples samples x $max_len tokens: $(echo "$finished - $start" | bc) s, peak RssAnon $((peak / 1024)) MiB"
