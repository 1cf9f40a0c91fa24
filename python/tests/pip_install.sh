#!/bin/sh
# `pip install .` from the repository into a fresh virtual environment (with the system's site packages, offline),
# then `import tdyn` with no PYTHONPATH and one small call. Run by ctest (python_pip_install), which sets
#   PYTHON           the interpreter the environment is made from
#   TDYN_SOURCE_DIR  the repository
#   TDYN_BUILD_DIR   the configured CMake tree whose built module pip reuses (setup.py), so nothing compiles twice
# Exits 77 (skipped) when the interpreter cannot make a virtual environment (Debian: python3-venv missing).
set -eu
venv="$TDYN_BUILD_DIR/pip-install-test"
rm -rf "$venv"
if ! "$PYTHON" -m venv --system-site-packages "$venv"; then
  echo "skipped: $PYTHON -m venv failed (apt-get install python3-venv)"
  exit 77
fi
"$venv/bin/python" -m pip install --no-build-isolation --no-index --no-cache-dir "$TDYN_SOURCE_DIR"
unset PYTHONPATH
cd "$venv"  # nowhere near build/python, so only the installed module can be found
"$venv/bin/python" -B - <<'PY'
import os, sys
import numpy as np
import tdyn

location = os.path.realpath(tdyn.__file__)
assert location.startswith(os.path.realpath(sys.prefix) + os.sep), f"tdyn imported from {location}, not the environment {sys.prefix}"
spectrum = tdyn.dominant_spectrum(np.array([[2.0, 0.0], [0.0, 0.5]]))
assert abs(spectrum["lambda1"] - 2.0) < 1e-12, spectrum
# The default corpus is installed with the module, and found from it rather than from the working directory.
corpus = os.path.realpath(tdyn.default_corpus())
assert corpus.startswith(os.path.realpath(sys.prefix) + os.sep) and os.path.getsize(corpus) > 1_000_000, corpus
print(f"tdyn {tdyn.__version__} from {location}: lambda1 {spectrum['lambda1']}")
PY
