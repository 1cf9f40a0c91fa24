#!/usr/bin/python3
"""Writes signed_graph.csv, the fixed signed graph of the leidenalg comparison in tests/test_topology.cpp.

The graph is built the way tdyn builds activation graphs: 96 units driven by 6 latent factors (each unit loads on
one factor with a random sign, a few on two factors, plus noise), their Pearson correlation over 400 rows, and the
union of every unit's top-8 edges by |r| with the sign kept. Opposite-sign loadings make negatively correlated
groups, so both layers of the signed objective matter. Deterministic (numpy default_rng(2026)).

Run: /usr/bin/python3 tests/data/topology/make_signed_graph.py
"""
import pathlib

import numpy as np

N_UNITS, N_FACTORS, N_ROWS, TOP_K = 96, 6, 400, 8

rng = np.random.default_rng(2026)
loadings = np.zeros((N_UNITS, N_FACTORS))
for unit in range(N_UNITS):
    loadings[unit, unit % N_FACTORS] = rng.choice([-1.0, 1.0]) * rng.uniform(0.6, 1.0)
    if rng.uniform() < 0.15:  # a few units mix two factors: candidates for boundary nodes
        loadings[unit, rng.integers(N_FACTORS)] += rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 0.6)
factors = rng.standard_normal((N_ROWS, N_FACTORS))
activations = factors @ loadings.T + 0.9 * rng.standard_normal((N_ROWS, N_UNITS))
r = np.corrcoef(activations, rowvar=False)

edges = {}
for i in range(N_UNITS):
    strength = np.abs(r[i]).copy()
    strength[i] = -1.0
    order = sorted(range(N_UNITS), key=lambda j: (-strength[j], j))  # ties to the lower index, as tdyn does
    for j in order[:TOP_K]:
        edges[(min(i, j), max(i, j))] = r[i, j]

path = pathlib.Path(__file__).with_name("signed_graph.csv")
with open(path, "w") as out:
    out.write("source,target,weight\n")
    for (i, j), w in sorted(edges.items()):
        out.write(f"{i},{j},{w:.17g}\n")
print(f"{path}: {N_UNITS} nodes, {len(edges)} edges ({sum(w < 0 for w in edges.values())} negative)")
