#!/usr/bin/python3
"""Writes a random llama2.c legacy checkpoint (header + float32 weights, shared classifier) for benchmarks.

usage: make_llama2c_model.py OUT.bin DIM LAYERS HEADS KV_HEADS HIDDEN VOCAB SEQ_LEN
"""
import sys

import numpy as np

out, dim, layers, heads, kv_heads, hidden, vocab, seq_len = sys.argv[1], *map(int, sys.argv[2:9])
rng = np.random.default_rng(0)
head = dim // heads
kv_dim = head * kv_heads


def normal(*shape):
    return rng.normal(0.0, 0.02, size=shape).astype(np.float32)


with open(out, "wb") as f:
    np.array([dim, hidden, layers, heads, kv_heads, vocab, seq_len], dtype=np.int32).tofile(f)
    for block in [normal(vocab, dim), np.ones((layers, dim), np.float32), normal(layers, dim, dim),
                  normal(layers, kv_dim, dim), normal(layers, kv_dim, dim), normal(layers, dim, dim),
                  np.ones((layers, dim), np.float32), normal(layers, hidden, dim), normal(layers, dim, hidden),
                  normal(layers, hidden, dim), np.ones(dim, np.float32), np.zeros(seq_len * head, np.float32)]:
        block.tofile(f)
