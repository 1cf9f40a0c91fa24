#!/usr/bin/python3
"""The PyTorch CPU baseline for bench/prefill_vs_torch.sh: a float32 forward pass of a llama2.c legacy checkpoint
(the same maths as tdyn's llama2.c path: RMSNorm, interleaved RoPE, causal softmax attention, SwiGLU MLP, tied
classifier), written the way a PyTorch user writes it: batched matmuls, no autograd.

usage: torch_llama2c_forward.py MODEL.bin TOKENS REPEATS INTRA_OP_THREADS
prints the median prefill tokens/s over REPEATS runs of one TOKENS-long prompt.
"""
import statistics
import sys
import time

import numpy as np
import torch

path, n_tokens, repeats, threads = sys.argv[1], *map(int, sys.argv[2:5])
torch.set_num_threads(threads)

header = np.fromfile(path, dtype=np.int32, count=7)
dim, hidden, layers, heads, kv_heads, vocab, seq_len = map(int, header)
shared = vocab > 0
vocab = abs(vocab)
head = dim // heads
kv_dim = head * kv_heads
data = torch.from_numpy(np.fromfile(path, dtype=np.float32, offset=28))
offset = 0


def take(*shape):
    global offset
    n = int(np.prod(shape))
    t = data[offset:offset + n].reshape(shape)
    offset += n
    return t


emb = take(vocab, dim)
rms_att, wq, wk = take(layers, dim), take(layers, dim, dim), take(layers, kv_dim, dim)
wv, wo, rms_ffn = take(layers, kv_dim, dim), take(layers, dim, dim), take(layers, dim)
w1, w2, w3 = take(layers, hidden, dim), take(layers, dim, hidden), take(layers, hidden, dim)
rms_final = take(dim)
wcls = emb if shared else None
assert wcls is not None, "this baseline reads checkpoints with a shared classifier (make_llama2c_model.py writes one)"

positions = torch.arange(n_tokens, dtype=torch.float32)
inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head, 2, dtype=torch.float32) / head))
angles = positions[:, None] * inv_freq[None, :]
cos, sin = torch.cos(angles)[:, None, :], torch.sin(angles)[:, None, :]  # [T, 1, head/2]
mask = torch.full((n_tokens, n_tokens), float("-inf")).triu(1)


def rms_norm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


def rope(x):  # llama2.c rotates interleaved pairs (2i, 2i + 1)
    x = x.view(n_tokens, -1, head // 2, 2)
    a, b = x[..., 0], x[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).view(n_tokens, -1, head)


def forward(ids):
    x = emb[ids]
    for l in range(layers):
        h = rms_norm(x, rms_att[l])
        q = rope((h @ wq[l].T).view(n_tokens, heads, head)).transpose(0, 1)
        k = rope((h @ wk[l].T).view(n_tokens, kv_heads, head)).transpose(0, 1)
        v = (h @ wv[l].T).view(n_tokens, kv_heads, head).transpose(0, 1)
        if kv_heads != heads:
            k = k.repeat_interleave(heads // kv_heads, dim=0)
            v = v.repeat_interleave(heads // kv_heads, dim=0)
        scores = (q @ k.transpose(1, 2)) / head ** 0.5 + mask
        z = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(n_tokens, dim)
        x = x + z @ wo[l].T
        h = rms_norm(x, rms_ffn[l])
        x = x + (torch.nn.functional.silu(h @ w1[l].T) * (h @ w3[l].T)) @ w2[l].T
    return rms_norm(x, rms_final) @ wcls.T


ids = torch.arange(n_tokens) % vocab
with torch.inference_mode():
    forward(ids)  # warm-up
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward(ids)
        seconds.append(time.perf_counter() - start)
print(f"{n_tokens / statistics.median(seconds):.1f}")
