"""PyTorch side of bench/jacobian_vs_torch.sh: an independent float64 implementation of one Llama layer's two
residual steps at one position (other positions' keys/values fixed), differentiated with
torch.autograd.functional.jacobian(..., vectorize=True), on the same safetensors weights tdyn loads.

usage: /usr/bin/python3 jacobian_vs_torch.py MODEL_DIR T REPEATS
Prints JSON: median seconds per d x d Jacobian (attention step, MLP step; the faster of torch's default thread
count and all cores) and the relative difference to tdyn's
jac_attn.npy / jac_mlp.npy written next to MODEL_DIR by `jacobian_bench single`.
"""
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

torch.set_default_dtype(torch.float64)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info["dtype"]
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"]).astype(np.float64))
    return out


def main():
    model_dir, T, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    W = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    d, H, G = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, theta = d // H, cfg["rms_norm_eps"], cfg["rope_theta"]
    p = "model.layers.0."
    wq, wk, wv, wo = (W[p + f"self_attn.{n}_proj.weight"] for n in "qkvo")
    w_in, w_post = W[p + "input_layernorm.weight"], W[p + "post_attention_layernorm.weight"]
    wg, wu, wd = (W[p + f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))

    ids = [1 + i % (cfg["vocab_size"] - 1) for i in range(T)]  # as jacobian_bench single
    X = W["model.embed_tokens.weight"][ids]  # resid_pre of layer 0 [T, d]
    pos = T - 1
    inv_freq = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)

    def rms(x, w):
        return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)

    def rope(x, t):  # x [..., heads, hd] at positions t [...]
        ang = t[..., None, None] * inv_freq
        cos, sin = torch.cos(torch.cat([ang, ang], -1)), torch.sin(torch.cat([ang, ang], -1))
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    positions = torch.arange(T, dtype=torch.float64)
    hX = rms(X, w_in)
    K0 = rope((hX @ wk.T).view(T, G, hd), positions)
    V0 = (hX @ wv.T).view(T, G, hd)

    def attention_step(x):
        h = rms(x, w_in)
        q = rope((wq @ h).view(H, hd), positions[pos])
        k = rope((wk @ h).view(G, hd), positions[pos])
        v = (wv @ h).view(G, hd)
        K = torch.cat([K0[:pos], k[None]], 0)  # keys 0..pos, position p's own from x
        V = torch.cat([V0[:pos], v[None]], 0)
        # GQA: query head h = g * (H / G) + m reads kv head g (grouped, not gathered: under vmap a gathered K[:, g]
        # is a [d, T, H, d_head] copy).
        qg = q.view(G, H // G, hd)
        scores = torch.einsum("gmd,jgd->gmj", qg, K) / math.sqrt(hd)
        z = torch.einsum("gmj,jgd->gmd", torch.softmax(scores, -1), V)
        return x + wo @ z.reshape(-1)

    def mlp_step(x):
        h = rms(x, w_post)
        return x + wd @ (torch.nn.functional.silu(wg @ h) * (wu @ h))

    x_pre = X[pos].clone()
    x_mid = attention_step(x_pre).detach()
    result = {"torch_version": torch.__version__, "d_model": d}
    # Torch's default intra-op thread count and every core this process may use (as tdyn's BLAS does); the faster
    # median counts.
    thread_counts = sorted({torch.get_num_threads(), len(os.sched_getaffinity(0))})
    for name, f, x in (("attn", attention_step, x_pre), ("mlp", mlp_step, x_mid)):
        best = None
        for threads in thread_counts:
            torch.set_num_threads(threads)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                J = torch.autograd.functional.jacobian(f, x, vectorize=True)
                times.append(time.perf_counter() - t0)
            median = sorted(times)[len(times) // 2]
            if best is None or median < best[0]:
                best = (median, threads)
        ours = np.load(os.path.join(os.path.dirname(os.path.abspath(model_dir)), f"jac_{name}.npy"))
        rel = float(np.linalg.norm(ours - J.numpy()) / np.linalg.norm(J.numpy()))
        result[name] = {"torch_s": best[0], "torch_threads": best[1], "relative_difference_to_tdyn": rel}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
