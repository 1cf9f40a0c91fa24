#!/usr/bin/python3
"""Float64 references for GPT-NeoX / Pythia (GPTNeoXForCausalLM), in the layout of shared/fixtures.

usage:  /usr/bin/python3 tests/refgen/gpt_neox.py SHARED_DIR OUT_DIR

Writes OUT_DIR/parallel/ (use_parallel_residual true, rotary_pct 0.25) and OUT_DIR/sequential/
(use_parallel_residual false, rotary_pct 0.5), each with config.json, model.safetensors (float32, HF names) and
refs.safetensors (float64), keyed as shared/fixtures/README.md describes: seq{s}.input_ids, seq{s}.embeddings,
seq{s}.blocks.{l}.hook_resid_pre / hook_attn_out / hook_resid_mid / hook_mlp_out / hook_resid_post /
attn.hook_pattern, seq{s}.final_hidden, seq{s}.logits, seq0.pos{p}.blocks.{l}.jac_attn / jac_mlp / jac_block
(p = 5 and 23) and blocks.{l}.layer_matrix / layer_matrix_bias. Reuses the float64 primitives and the
safetensors writer of SHARED_DIR/fixtures/_gen; the model itself follows transformers'
models/gpt_neox/modeling_gpt_neox.py (GPTNeoXAttention, GPTNeoXMLP, GPTNeoXLayer), eval mode:

  qkv = query_key_value(x).view(T, H, 3 * hd): per head h the rows [q_h; k_h; v_h]
  q, k: rotate_half RoPE on the first rotary_ndims = int(hd * rotary_pct) dims of each head,
        inv_freq = 1 / base^(arange(0, rotary_ndims, 2) / rotary_ndims); the other dims pass through
  scores * hd^-0.5, causal softmax, dense (with bias)
  mlp = dense_4h_to_h(act(dense_h_to_4h(x)))             hidden_act "gelu" = exact erf GELU
  parallel:    out = mlp(ln2(x)) + attn(ln1(x)) + x
  sequential:  h = attn(ln1(x)) + x; out = mlp(ln2(h)) + h
  logits = embed_out(final_layer_norm(x))                 (untied)

Hooks of a parallel block (the tdyn convention, docs/jacobian.md): hook_resid_mid = resid_pre + attn_out;
jac_attn = d resid_mid[p] / d resid_pre[p]; jac_mlp = d (x + mlp(ln2(x))) / dx at x = resid_pre[p];
jac_block = d resid_post[p] / d resid_pre[p], taken through the whole layer (not from the other two).
Exit status 77 when torch is missing.
"""
import json
import math
import os
import sys
from collections import OrderedDict

try:
    import torch
    from torch.autograd.functional import jacobian
except ImportError:
    print("gpt_neox.py: torch is not installed for " + sys.executable, file=sys.stderr)
    sys.exit(77)

SEQ_LENS = (24, 7)
JAC_POSITIONS = (5, 23)
STD_W, STD_B, STD_NORM = 0.2, 0.1, 0.1  # as the shared fixtures


def config(parallel, rotary_pct):
    return OrderedDict([
        ("architectures", ["GPTNeoXForCausalLM"]),
        ("attention_bias", True),
        ("attention_dropout", 0.0),
        ("bos_token_id", 0),
        ("classifier_dropout", 0.1),
        ("eos_token_id", 0),
        ("hidden_act", "gelu"),
        ("hidden_dropout", 0.0),
        ("hidden_size", 64),
        ("initializer_range", 0.02),
        ("intermediate_size", 160),
        ("layer_norm_eps", 1e-05),
        ("max_position_embeddings", 64),
        ("model_type", "gpt_neox"),
        ("num_attention_heads", 4),
        ("num_hidden_layers", 3),
        ("rope_scaling", None),
        ("rotary_emb_base", 10000),
        ("rotary_pct", rotary_pct),
        ("tie_word_embeddings", False),
        ("torch_dtype", "float32"),
        ("use_cache", True),
        ("use_parallel_residual", parallel),
        ("vocab_size", 96),
    ])


def weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    n = lambda shape, std=STD_W: torch.randn(shape, generator=g, dtype=torch.float64) * std
    d, F, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    sd = OrderedDict()
    sd["gpt_neox.embed_in.weight"] = n((V, d))
    for i in range(L):
        p = f"gpt_neox.layers.{i}."
        sd[p + "input_layernorm.weight"] = 1.0 + n((d,), STD_NORM)
        sd[p + "input_layernorm.bias"] = n((d,), STD_B)
        sd[p + "post_attention_layernorm.weight"] = 1.0 + n((d,), STD_NORM)
        sd[p + "post_attention_layernorm.bias"] = n((d,), STD_B)
        sd[p + "attention.query_key_value.weight"] = n((3 * d, d))
        sd[p + "attention.query_key_value.bias"] = n((3 * d,), STD_B)
        sd[p + "attention.dense.weight"] = n((d, d))
        sd[p + "attention.dense.bias"] = n((d,), STD_B)
        sd[p + "mlp.dense_h_to_4h.weight"] = n((F, d))
        sd[p + "mlp.dense_h_to_4h.bias"] = n((F,), STD_B)
        sd[p + "mlp.dense_4h_to_h.weight"] = n((d, F))
        sd[p + "mlp.dense_4h_to_h.bias"] = n((d,), STD_B)
        # Buffers older transformers versions saved (persistent): a loader must ignore them.
        if i == 0:
            T = cfg["max_position_embeddings"]
            sd[p + "attention.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            sd[p + "attention.masked_bias"] = torch.tensor(-1e9)
    sd["gpt_neox.final_layer_norm.weight"] = 1.0 + n((d,), STD_NORM)
    sd["gpt_neox.final_layer_norm.bias"] = n((d,), STD_B)
    sd["embed_out.weight"] = n((V, d))
    return OrderedDict((k, v.to(torch.float32)) for k, v in sd.items())


class GPTNeoX:
    def __init__(self, cfg, sd):
        self.cfg = cfg
        self.W = {k: v.to(torch.float64) for k, v in sd.items()}
        self.d, self.H = cfg["hidden_size"], cfg["num_attention_heads"]
        self.hd = self.d // self.H
        self.n_layers = cfg["num_hidden_layers"]
        self.eps = cfg["layer_norm_eps"]
        self.parallel = cfg["use_parallel_residual"]
        self.act = N.ACT[cfg["hidden_act"]]
        self.rot = int(self.hd * cfg["rotary_pct"])
        self.inv_freq = 1.0 / (cfg["rotary_emb_base"] ** (torch.arange(0, self.rot, 2, dtype=torch.float64) / self.rot))

    def w(self, name):
        return self.W["gpt_neox." + name] if "gpt_neox." + name in self.W else self.W[name]

    def ln(self, x, name):
        return N.layer_norm(x, self.w(name + ".weight"), self.w(name + ".bias"), self.eps)

    def attn_out(self, l, x):
        """attention(input_layernorm(x)) of layer l for the whole sequence x [T, d]: (output [T, d], probs [H, T, T])."""
        p = f"layers.{l}."
        T = x.shape[0]
        h = self.ln(x, p + "input_layernorm")
        qkv = N.linear(h, self.w(p + "attention.query_key_value.weight"), self.w(p + "attention.query_key_value.bias"))
        qkv = qkv.view(T, self.H, 3 * self.hd).permute(1, 0, 2)  # [H, T, 3 hd]
        q, k, v = qkv[..., : self.hd], qkv[..., self.hd: 2 * self.hd], qkv[..., 2 * self.hd:]
        cos, sin = N.rope_cos_sin(self.inv_freq, T, torch.float64)  # [T, rot]
        q = torch.cat((N.apply_rope(q[..., : self.rot], cos, sin), q[..., self.rot:]), dim=-1)
        k = torch.cat((N.apply_rope(k[..., : self.rot], cos, sin), k[..., self.rot:]), dim=-1)
        o, probs = N.sdpa(q, k, v, N.causal_mask(T), self.hd ** -0.5)
        return N.linear(N.merge_heads(o), self.w(p + "attention.dense.weight"), self.w(p + "attention.dense.bias")), probs

    def mlp_out(self, l, x):
        """mlp(post_attention_layernorm(x)) of layer l, row by row."""
        p = f"layers.{l}."
        h = self.ln(x, p + "post_attention_layernorm")
        u = self.act(N.linear(h, self.w(p + "mlp.dense_h_to_4h.weight"), self.w(p + "mlp.dense_h_to_4h.bias")))
        return N.linear(u, self.w(p + "mlp.dense_4h_to_h.weight"), self.w(p + "mlp.dense_4h_to_h.bias"))

    def layer(self, l, x):
        """GPTNeoXLayer.forward: the hooks of layer l with input x."""
        a, probs = self.attn_out(l, x)
        if self.parallel:
            m = self.mlp_out(l, x)
            return OrderedDict([("hook_attn_out", a), ("hook_resid_mid", x + a), ("hook_mlp_out", m),
                                ("hook_resid_post", m + a + x), ("attn.hook_pattern", probs)])
        mid = a + x
        m = self.mlp_out(l, mid)
        return OrderedDict([("hook_attn_out", a), ("hook_resid_mid", mid), ("hook_mlp_out", m),
                            ("hook_resid_post", m + mid), ("attn.hook_pattern", probs)])

    def forward(self, ids):
        x = self.w("embed_in.weight")[ids]
        tr = OrderedDict([("embeddings", x)])
        for l in range(self.n_layers):
            hooks = self.layer(l, x)
            tr[f"blocks.{l}.hook_resid_pre"] = x
            for k, v in hooks.items():
                tr[f"blocks.{l}.{k}"] = v
            x = hooks["hook_resid_post"]
        fh = self.ln(x, "final_layer_norm")
        tr["final_hidden"] = fh
        tr["logits"] = N.linear(fh, self.W["embed_out.weight"])
        return tr

    def jacobians(self, tr, positions):
        """Per-position Jacobians; every other position's residual vector held at its forward value."""
        out = OrderedDict()
        for p in positions:
            for l in range(self.n_layers):
                pre, mid = tr[f"blocks.{l}.hook_resid_pre"], tr[f"blocks.{l}.hook_resid_mid"]
                at = lambda x, v: torch.cat([x[:p], v[None], x[p + 1:]], dim=0)
                f_attn = lambda v: at(pre, v)[p] + self.attn_out(l, at(pre, v))[0][p]
                mlp_input = pre if self.parallel else mid  # the MLP step is x + mlp(ln2(x)) at what the MLP reads
                f_mlp = lambda v: v + self.mlp_out(l, v[None])[0]
                f_block = lambda v: self.layer(l, at(pre, v))["hook_resid_post"][p]
                out[f"pos{p}.blocks.{l}.jac_attn"] = jacobian(f_attn, pre[p].clone())
                out[f"pos{p}.blocks.{l}.jac_mlp"] = jacobian(f_mlp, mlp_input[p].clone())
                out[f"pos{p}.blocks.{l}.jac_block"] = jacobian(f_block, pre[p].clone())
        return out

    def layer_matrix(self, l):
        """F = W_O W_V and c = W_O b_V + b_O with W_V's rows taken out of the per-head fused query_key_value."""
        p = f"layers.{l}.attention."
        Wqkv = self.w(p + "query_key_value.weight").view(self.H, 3 * self.hd, self.d)
        bqkv = self.w(p + "query_key_value.bias").view(self.H, 3 * self.hd)
        Wv = Wqkv[:, 2 * self.hd:, :].reshape(self.d, self.d)
        bv = bqkv[:, 2 * self.hd:].reshape(self.d)
        Wo, bo = self.w(p + "dense.weight"), self.w(p + "dense.bias")
        return Wo @ Wv, Wo @ bv + bo


def check_composition(model, jacs):
    """Self-check: jac_block (through the whole layer) against the composition rule of the block."""
    I = torch.eye(model.d, dtype=torch.float64)
    for key in [k for k in jacs if k.endswith(".jac_block")]:
        base = key[: -len("jac_block")]
        a, m, b = jacs[base + "jac_attn"], jacs[base + "jac_mlp"], jacs[key]
        expect = a + m - I if model.parallel else m @ a
        err = float((b - expect).abs().max() / b.abs().max())
        assert err < 1e-12, f"{key}: block Jacobian differs from its composition by {err}"


def make(name, cfg, seed, out_dir):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    sd = weights(cfg, seed)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    sfio.save(sd, os.path.join(d, "model.safetensors"), {"format": "pt"})
    model = GPTNeoX(cfg, sd)
    g = torch.Generator().manual_seed(seed + 7)
    refs = OrderedDict()
    for s, T in enumerate(SEQ_LENS):
        ids = torch.randint(0, cfg["vocab_size"], (T,), generator=g, dtype=torch.int64)
        with torch.no_grad():
            tr = model.forward(ids)
        refs[f"seq{s}.input_ids"] = ids
        for k, v in tr.items():
            refs[f"seq{s}.{k}"] = v
        if s == 0:
            jacs = model.jacobians(tr, JAC_POSITIONS)
            check_composition(model, jacs)
            for k, v in jacs.items():
                refs[f"seq0.{k}"] = v
    for l in range(model.n_layers):
        F, c = model.layer_matrix(l)
        refs[f"blocks.{l}.layer_matrix"] = F
        refs[f"blocks.{l}.layer_matrix_bias"] = c
    refs = OrderedDict((k, v.contiguous()) for k, v in refs.items())
    sfio.save(refs, os.path.join(d, "refs.safetensors"), {"generator": "tests/refgen/gpt_neox.py"})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    shared, out = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(shared, "fixtures", "_gen"))
    import nn64 as N  # noqa: E402
    import sfio  # noqa: E402
    torch.set_num_threads(1)
    make("parallel", config(True, 0.25), 2001, out)
    make("sequential", config(False, 0.5), 2002, out)
