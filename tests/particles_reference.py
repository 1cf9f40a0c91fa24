#!/usr/bin/python3
"""Independent numpy implementation of the discrete self-attention dynamics of Geshkovski et al. (2023):

    x_i^{k+1} = x_i^k + dt * sum_j P_ij(x^k) V x_j^k,   P_ij = softmax_j <Q x_i, K x_j>   (log-sum-exp)

the scheme the authors ran (Euler with P frozen per step). Used by the tests as a reference and by the benchmark
as a baseline.

  particles_reference.py simulate X0.npy Q.npy K.npy V.npy DT STEPS OUT.npy
      writes the trajectory, shape (STEPS + 1, n, d), float64
  particles_reference.py bench N D STEPS
      prints one JSON line {"n":..., "d":..., "steps_per_second":...} for random inputs
"""
import json
import sys
import time

import numpy as np


def attention(x, q, k):
    """P (n, n) with rows softmax_j <Q x_i, K x_j>, shifting each row by its maximum."""
    scores = (x @ q.T) @ (x @ k.T).T
    scores = scores - scores.max(axis=1, keepdims=True)
    weights = np.exp(scores)
    return weights / weights.sum(axis=1, keepdims=True)


def step(x, q, k, v, dt):
    p = attention(x, q, k)
    return x + dt * (p @ x) @ v.T


def simulate(x0, q, k, v, dt, steps):
    out = np.empty((steps + 1,) + x0.shape)
    out[0] = x0
    for s in range(steps):
        out[s + 1] = step(out[s], q, k, v, dt)
    return out


def main(argv):
    if len(argv) == 9 and argv[1] == "simulate":
        x0, q, k, v = (np.load(p).astype(np.float64) for p in argv[2:6])
        np.save(argv[8], simulate(x0, q, k, v, float(argv[6]), int(argv[7])))
        return 0
    if len(argv) == 5 and argv[1] == "bench":
        n, d, steps = int(argv[2]), int(argv[3]), int(argv[4])
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, (n, d))
        q = rng.normal(0, d ** -0.5, (d, d))
        k = rng.normal(0, d ** -0.5, (d, d))
        v = np.eye(d) + rng.normal(0, 0.1 * d ** -0.5, (d, d))
        step(x, q, k, v, 1e-3)  # warm-up
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            y = x
            for _ in range(steps):
                y = step(y, q, k, v, 1e-3)
            best = min(best, time.perf_counter() - start)
        print(json.dumps({"n": n, "d": d, "steps_per_second": steps / best}))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
