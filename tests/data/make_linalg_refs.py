#!/usr/bin/python3
"""Writes the reference matrices for tests/test_linalg.cpp into tests/data/linalg/.

For each case NAME: NAME.matrix.npy (float64, m x n), NAME.singular_values.npy (float64, descending) and, for
square matrices, NAME.eigenvalues.npy (float64, d x 2: real and imaginary parts, numpy's order) and
NAME.eigenvectors.npy (float64, d x d x 2: column j is the unit eigenvector of eigenvalue j, real and imaginary
parts). Values come from numpy.linalg; the C++ test compares eigenvalues as multisets and eigenvectors up to a
unit complex factor (phase). Run with /usr/bin/python3 from the repository root:
    /usr/bin/python3 tests/data/make_linalg_refs.py
"""
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "linalg")


def cases():
    rng = np.random.default_rng(20240611)
    yield "gaussian8", rng.standard_normal((8, 8))  # a few complex pairs
    yield "gaussian32", rng.standard_normal((32, 32)) / np.sqrt(32)
    s = rng.standard_normal((16, 16))
    yield "symmetric16", s + s.T  # real spectrum
    t = np.triu(rng.standard_normal((12, 12)))
    np.fill_diagonal(t, np.arange(1, 13, dtype=float))
    yield "triangular12", t  # strongly non-normal, real distinct eigenvalues
    q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    yield "orthogonal10", q  # every eigenvalue on the unit circle
    yield "rectangular20x12", rng.standard_normal((20, 12))  # SVD only


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, a in cases():
        a = np.ascontiguousarray(a, dtype=np.float64)
        np.save(os.path.join(OUT, f"{name}.matrix.npy"), a)
        np.save(os.path.join(OUT, f"{name}.singular_values.npy"), np.linalg.svd(a, compute_uv=False))
        if a.shape[0] == a.shape[1]:
            w, v = np.linalg.eig(a)
            np.save(os.path.join(OUT, f"{name}.eigenvalues.npy"), np.stack([w.real, w.imag], axis=1))
            np.save(os.path.join(OUT, f"{name}.eigenvectors.npy"), np.stack([v.real, v.imag], axis=2))


if __name__ == "__main__":
    main()
