#!/usr/bin/env bash
# Installs every build and test dependency of tdyn from Debian's archive (Debian 12). Needs root or sudo.
# --bench also installs what the benchmarks compare against (SciPy, leidenalg; PyTorch is always installed).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache
  clang libclang-rt-14-dev libomp-dev  # the instrumented build (ASan + UBSan + libFuzzer) and its OpenMP
  libeigen3-dev libopenblas-dev liblapacke-dev libspectra-dev libboost-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libbenchmark-dev
  libigraph-dev libarpack2-dev libglpk-dev libplfit-dev
  libicu-dev
  libdnnl-dev  # oneDNN: prompts' products with packed weights (optional: the build uses sgemm without it)
  libxsmm-dev  # float64 kernels for a particle step's small products (optional: the build uses dgemm without it)
  libsentencepiece-dev  # SentencePiece .model files and the Precompiled normalizer; its trainer builds test models
  gnuplot-nox
  libopenmpi-dev openmpi-bin  # MPI ranks (mpirun -np N tdyn ...); the build leaves MPI out without them
  chromium  # the report's rendering test (tests/report_renders_in_chromium.py); skipped without it
  pybind11-dev python3-dev
  python3-numpy
  python3-sentencepiece  # an independent binding the SentencePiece tests compare with (skipped without it)
  python3-torch  # float64 references of the generated families and torch.save files for the PyTorch reader's tests
  python3-venv python3-pip python3-setuptools python3-wheel  # `pip install .` (and its test in a fresh venv)
)
# Reference implementations used only by benchmarks and by the scripts that regenerate test expectations.
if [ "${1:-}" = "--bench" ]; then packages+=(python3-scipy python3-leidenalg bc); fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${packages[@]}"
