#!/usr/bin/python3
"""Writes a random llama2.c legacy checkpoint (header + float32 weights, shared classifier) for benchmarks, and
optionally the same model as a Hugging Face Llama directory in bfloat16 (weights rounded to nearest even; q/k rows
permuted from llama2.c's interleaved RoPE pairs to HF's rotate-half layout, as HF's conversion script does).

usage: make_llama2c_model.py OUT.bin DIM LAYERS HEADS KV_HEADS HIDDEN VOCAB SEQ_LEN [HF_BF16_DIR]
"""
import json
import os
import sys

import numpy as np

out, dim, layers, heads, kv_heads, hidden, vocab, seq_len = sys.argv[1], *map(int, sys.argv[2:9])
rng = np.random.default_rng(0)
head = dim // heads
kv_dim = head * kv_heads


def normal(*shape):
    return rng.normal(0.0, 0.02, size=shape).astype(np.float32)


emb, rms_att, wq, wk = normal(vocab, dim), np.ones((layers, dim), np.float32), normal(layers, dim, dim), normal(layers, kv_dim, dim)
wv, wo, rms_ffn = normal(layers, kv_dim, dim), normal(layers, dim, dim), np.ones((layers, dim), np.float32)
w1, w2, w3 = normal(layers, hidden, dim), normal(layers, dim, hidden), normal(layers, hidden, dim)
rms_final = np.ones(dim, np.float32)
with open(out, "wb") as f:
    np.array([dim, hidden, layers, heads, kv_heads, vocab, seq_len], dtype=np.int32).tofile(f)
    for block in [emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, np.zeros(seq_len * head, np.float32)]:
        block.tofile(f)

if len(sys.argv) > 9:
    hf = sys.argv[9]
    os.makedirs(hf, exist_ok=True)

    def to_hf_rope(w, n_heads):  # rows (2i, 2i + 1) of each head -> (i, i + head/2)
        return w.reshape(n_heads, head // 2, 2, dim).transpose(0, 2, 1, 3).reshape(-1, dim)

    tensors = {"model.embed_tokens.weight": emb, "model.norm.weight": rms_final}
    for l in range(layers):
        p = f"model.layers.{l}."
        tensors.update({p + "input_layernorm.weight": rms_att[l], p + "post_attention_layernorm.weight": rms_ffn[l],
                        p + "self_attn.q_proj.weight": to_hf_rope(wq[l], heads),
                        p + "self_attn.k_proj.weight": to_hf_rope(wk[l], kv_heads),
                        p + "self_attn.v_proj.weight": wv[l], p + "self_attn.o_proj.weight": wo[l],
                        p + "mlp.gate_proj.weight": w1[l], p + "mlp.up_proj.weight": w3[l], p + "mlp.down_proj.weight": w2[l]})
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        bits = np.ascontiguousarray(t, dtype=np.float32).view(np.uint32)
        blob = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(hf, "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for blob in blobs:
            f.write(blob)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
              "intermediate_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": seq_len,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": True,
              "torch_dtype": "bfloat16"}
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
