#!/usr/bin/env bash
# Regenerates the README's gallery, docs/gallery/*.png, from the real models in ../shared/models (or
# $TDYN_SHARED/models): runs `tdyn analyze` on three of them, screenshots the chosen SVG figures with headless
# Chromium at their own size, and stores each as a palette PNG (tests/png_util.py shrink). Not part of the tests.
#
#   scripts/make-gallery.sh            # uses build/tdyn; TDYN=path/to/tdyn to use another build
#   GALLERY_WORK=/tmp/g scripts/make-gallery.sh   # keep the analyze directories there (default: a temporary one)
#
# Needs chromium (apt-get install chromium) and /usr/bin/python3 with numpy. About a minute on one core.
set -euo pipefail
cd "$(dirname "$0")/.."
tdyn=${TDYN:-build/tdyn}
shared=$(realpath "${TDYN_SHARED:-../shared}")
export TDYN_SHARED=$shared  # the default corpus, WikiText-2, is found there
python=/usr/bin/python3
[ -x "$python" ] || python=python3
browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null; then browser=$(command -v "$b"); break; fi
done
[ -n "$browser" ] || { echo "make-gallery: chromium not found (apt-get install chromium)" >&2; exit 1; }
[ -x "$tdyn" ] || { echo "make-gallery: $tdyn not found (build first, or set TDYN)" >&2; exit 1; }
[ -d "$shared/models" ] || { echo "make-gallery: $shared/models not found (set TDYN_SHARED)" >&2; exit 1; }
work=${GALLERY_WORK:-$(mktemp -d /tmp/tdyn-gallery.XXXXXX)}
mkdir -p "$work" docs/gallery
models=$shared/models

# The analyses. --threads 1: the numbers do not depend on it, and the machine may be busy.
analyze() {
  local name=$1
  shift
  echo "make-gallery: tdyn --threads 1 analyze $* --out $work/$name" >&2
  OMP_NUM_THREADS=1 "$tdyn" --threads 1 --quiet analyze "$@" --out "$work/$name" >/dev/null
}
analyze stories260K "$models/stories260K/stories260K.bin" --samples 200
analyze llama2xs "$models/llama2xs/model.bin" --samples 200
# A character-level model: its 54-character vocabulary cannot encode WikiText-2, so it reads its own corpus.
analyze slm4096 "$models/slm4096" --data "$models/slm4096/corpus.txt" --samples 200

# One figure: screenshot NAME.svg at its viewBox size (gnuplot's SVGs have no width/height, so the window sets
# the scale), then reduce it to a palette PNG.
shot() {
  local svg=$work/$1.svg png=docs/gallery/$2.png
  read -r w h < <(grep -m1 -o 'viewBox="[^"]*"' "$svg" | tr -d '"' | awk '{print $3, $4}')
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$work/chromium-profile" --window-size="$w,$h" --screenshot="$work/shot.png" "file://$svg" \
    >/dev/null 2>&1
  "$python" tests/png_util.py shrink "$work/shot.png" "$png"
  local bytes
  bytes=$(stat -c %s "$png")
  echo "make-gallery: $png ($w x $h, $((bytes / 1024)) KiB)" >&2
  if [ "$bytes" -gt 81920 ]; then echo "make-gallery: warning: $png is over 80 KiB" >&2; fi
}
shot stories260K/power/eigenvalues stories260K-eigenvalues
shot stories260K/power/gamma_rho stories260K-gamma-rho
shot slm4096/jacobian/cumulative_effective_rank slm4096-cumulative-effective-rank
shot llama2xs/jacobian/metric_henrici_normalized llama2xs-henrici
shot llama2xs/jacobian/surgery llama2xs-surgery
shot stories260K/topology/graph stories260K-graph
shot stories260K/topology/coupling_vs_depth stories260K-coupling
shot stories260K/particles/clusters stories260K-clusters
echo "make-gallery: done; the analyses are in $work (index.html in each)" >&2
