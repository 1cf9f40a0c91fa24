#!/usr/bin/env bash
# Installs every build and test dependency of tdyn from Debian's archive (Debian 12). Needs root or sudo.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libeigen3-dev libopenblas-dev liblapacke-dev libspectra-dev libboost-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libbenchmark-dev
  libigraph-dev libarpack2-dev libglpk-dev libplfit-dev
  libicu-dev
  gnuplot-nox
  pybind11-dev python3-dev
  python3-numpy python3-scipy python3-leidenalg python3-torch
)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${packages[@]}"
