#!/usr/bin/python3
"""Float64 reference fixtures for the Mistral, Qwen2, Qwen3 and Phi-3 families, in the layout of shared/fixtures.

Writes, for each family, DIR/<family>/{config.json, model.safetensors, refs.safetensors}: a tiny random checkpoint
with the exact Hugging Face tensor names and float64 references (hooks, attention patterns, final hidden state,
logits, per-position Jacobians, layer matrices) with the keys and conventions of shared/fixtures/README.md, so
that the fixture checks of tests/fixture_check.cpp and tests/test_jacobian.cpp apply unchanged.

The forward passes below are re-implemented from the Hugging Face modeling sources (transformers
models/mistral/modeling_mistral.py, models/qwen2/{modeling,configuration}_qwen2.py,
models/qwen3/{modeling,configuration}_qwen3.py, models/phi3/{modular,configuration}_phi3.py), not from tdyn. The float64 primitives, the Jacobian and layer-matrix
machinery and the safetensors writer are the shared fixture generator's (shared/fixtures/_gen), imported from there.

usage: /usr/bin/python3 extra_families.py --shared SHARED_DIR --out DIR
"""
import argparse
import json
import math
import os
import sys
from collections import OrderedDict

ap = argparse.ArgumentParser()
ap.add_argument("--shared", required=True, help="the shared/ test-data directory (its fixtures/_gen is imported)")
ap.add_argument("--out", required=True)
args = ap.parse_args()
sys.path.insert(0, os.path.join(args.shared, "fixtures", "_gen"))

try:
    import torch  # noqa: E402
except ImportError:
    print("extra_families.py: torch is not installed for " + sys.executable, file=sys.stderr)
    sys.exit(77)  # the tests skip

import families as F  # noqa: E402
import make_fixtures as MF  # noqa: E402
import nn64 as N  # noqa: E402
import refs as R  # noqa: E402
import sfio  # noqa: E402

torch.set_num_threads(1)


def partial_rope(x, cos, sin):
    """Phi-3 apply_rotary_pos_emb: rotate_half over the first rotary_dim = cos.shape[-1] dimensions, the rest
    pass through."""
    r = cos.shape[-1]
    return torch.cat([N.apply_rope(x[..., :r], cos, sin), x[..., r:]], dim=-1)


class Decoder(F.Base):
    """Pre-RMSNorm decoder shared by the three families; subclasses say how q/k/v and gate/up are produced,
    which layers have a sliding window and how many head dimensions RoPE rotates."""

    def __init__(self, cfg, weights, dtype=torch.float64):
        super().__init__(cfg, weights, dtype)
        self.d = cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]
        self.Hkv = cfg.get("num_key_value_heads") or self.H
        self.hd = cfg.get("head_dim") or self.d // self.H
        self.n_layers = cfg["num_hidden_layers"]
        self.eps = cfg["rms_norm_eps"]
        self.act = N.ACT[cfg["hidden_act"]]
        self.rotary_dim = int(self.hd * cfg.get("partial_rotary_factor", 1.0))
        self.inv_freq = N.inv_freq_default(cfg.get("rope_theta", 10000.0), self.rotary_dim)

    def extra_refs(self):
        return OrderedDict([("rope.inv_freq", self.inv_freq)])

    def embed(self, ids, extra):
        return {"x0": self.w("model.embed_tokens.weight")[ids]}

    def mask(self, l, T):
        w = self.window(l)
        return N.causal_mask(T) if w is None else N.sliding_mask(T, w)

    def attn(self, l, x, ctx, uniform=False):
        p = f"model.layers.{l}."
        T = x.shape[0]
        h = N.rms_norm(x, self.w(p + "input_layernorm.weight"), self.eps)
        q, k, v = self.qkv(l, h)
        q, k, v = N.split_heads(q, self.H, self.hd), N.split_heads(k, self.Hkv, self.hd), N.split_heads(v, self.Hkv, self.hd)
        q, k = self.qk_norms(l, q, k)
        cos, sin = N.rope_cos_sin(self.inv_freq, T, self.dtype)
        q, k = partial_rope(q, cos, sin), partial_rope(k, cos, sin)
        o, pat = N.sdpa(q, k, v, self.mask(l, T), self.hd ** -0.5, uniform)
        a = N.linear(N.merge_heads(o), self.w(p + "self_attn.o_proj.weight"), self.o_bias(l))
        return {"mid": x + a, "attn_out": a, "pattern": pat, "v_in": h}

    def qk_norms(self, l, q, k):
        return q, k  # none but Qwen3's

    def o_bias(self, l):
        return None  # o_proj has no bias in Mistral, Qwen2 and Phi-3

    def mlp(self, l, h, ctx):
        p = f"model.layers.{l}."
        m = N.rms_norm(h, self.w(p + "post_attention_layernorm.weight"), self.eps)
        gate, up = self.gate_up(l, m)
        f = N.linear(self.act(gate) * up, self.w(p + "mlp.down_proj.weight"))
        return {"post": h + f, "mlp_out": f}

    def final(self, x, ctx):
        fh = N.rms_norm(x, self.w("model.norm.weight"), self.eps)
        tied = self.cfg.get("tie_word_embeddings", False)
        head = self.w("model.embed_tokens.weight") if tied else self.w("lm_head.weight")
        return {"final_hidden": fh, "logits": fh @ head.T}

    # Llama-style separate projections (Mistral, Qwen2).
    def qkv(self, l, h):
        p = f"model.layers.{l}.self_attn."
        b = (lambda n: self.w(p + n + ".bias")) if self.qkv_bias else (lambda n: None)
        return tuple(N.linear(h, self.w(p + n + ".weight"), b(n)) for n in ("q_proj", "k_proj", "v_proj"))

    def gate_up(self, l, m):
        p = f"model.layers.{l}.mlp."
        return N.linear(m, self.w(p + "gate_proj.weight")), N.linear(m, self.w(p + "up_proj.weight"))

    def v_weight(self, l):
        p = f"model.layers.{l}.self_attn."
        return self.w(p + "v_proj.weight"), (self.w(p + "v_proj.bias") if self.qkv_bias else None)

    def layer_matrix(self, l):
        Wv, bv = self.v_weight(l)
        return self._f_from(self.w(f"model.layers.{l}.self_attn.o_proj.weight"), Wv, self.H, self.Hkv, self.hd, bv,
                            self.o_bias(l))


class Mistral(Decoder):
    """MistralAttention: sliding_window = config.sliding_window on every layer (None: plain causal)."""
    family = "mistral"
    qkv_bias = False

    def window(self, l):
        return self.cfg.get("sliding_window")


class Qwen2(Decoder):
    """Qwen2Attention: q/k/v with bias, o_proj without. Qwen2Config: sliding_window = None unless
    use_sliding_window; layer_types default 'sliding_attention' for layer_idx >= max_window_layers when a window
    is set; the layer's window is config.sliding_window if its type is 'sliding_attention'."""
    family = "qwen2"
    qkv_bias = True

    def __init__(self, cfg, weights, dtype=torch.float64):
        super().__init__(cfg, weights, dtype)
        sw = cfg.get("sliding_window", 4096) if cfg.get("use_sliding_window", False) else None
        types = cfg.get("layer_types") or ["sliding_attention" if sw is not None and i >= cfg.get("max_window_layers", 28)
                                           else "full_attention" for i in range(self.n_layers)]
        self.windows = [sw if t == "sliding_attention" else None for t in types]

    def window(self, l):
        return self.windows[l]


class Qwen3(Qwen2):
    """Qwen3Attention: Qwen2's windows; q_norm and k_norm, RMSNorms over the head dimension (one [head_dim] scale
    each, eps rms_norm_eps), on the projected queries and keys split into heads, before RoPE; q/k/v and o_proj
    biases all follow attention_bias; head_dim its own config entry."""
    family = "qwen3"

    def __init__(self, cfg, weights, dtype=torch.float64):
        super().__init__(cfg, weights, dtype)
        self.qkv_bias = cfg.get("attention_bias", False)
        self.with_qk_norms = cfg.get("_qk_norms", True)  # as_llama switches them off

    def qk_norms(self, l, q, k):
        if not self.with_qk_norms:
            return q, k
        p = f"model.layers.{l}.self_attn."
        return N.rms_norm(q, self.w(p + "q_norm.weight"), self.eps), N.rms_norm(k, self.w(p + "k_norm.weight"), self.eps)

    def o_bias(self, l):
        return self.w(f"model.layers.{l}.self_attn.o_proj.bias") if self.qkv_bias else None


class Phi3(Decoder):
    """Phi3Attention: qkv_proj rows [q (H*hd); k (Hkv*hd); v (Hkv*hd)], no biases; sliding_window on every layer;
    partial rotary (rotary dim int(hd * partial_rotary_factor)). Phi3MLP: gate, up = gate_up_proj(x).chunk(2);
    up * act(gate)."""
    family = "phi3"

    def window(self, l):
        return self.cfg.get("sliding_window")

    def qkv(self, l, h):
        qkv = N.linear(h, self.w(f"model.layers.{l}.self_attn.qkv_proj.weight"))
        qp, kvp = self.H * self.hd, self.Hkv * self.hd
        return qkv[..., :qp], qkv[..., qp:qp + kvp], qkv[..., qp + kvp:]

    def gate_up(self, l, m):
        gu = N.linear(m, self.w(f"model.layers.{l}.mlp.gate_up_proj.weight"))
        gate, up = gu.chunk(2, dim=-1)
        return gate, up

    def v_weight(self, l):
        qp, kvp = self.H * self.hd, self.Hkv * self.hd
        return self.w(f"model.layers.{l}.self_attn.qkv_proj.weight")[qp + kvp:], None


def base_config(arch, model_type, extra):
    c = OrderedDict([("architectures", [arch]), ("attention_dropout", 0.0), ("bos_token_id", 1), ("eos_token_id", 2),
                     ("hidden_act", "silu"), ("hidden_size", 64), ("initializer_range", 0.02),
                     ("model_type", model_type), ("num_attention_heads", 4), ("num_key_value_heads", 2),
                     ("rms_norm_eps", 1e-5), ("torch_dtype", "float32"), ("use_cache", True)])
    c.update(extra)
    return OrderedDict(sorted(c.items()))


def mistral_config():
    # window 6 < T = 24 (and < 7 of seq1): every layer's window is crossed.
    return base_config("MistralForCausalLM", "mistral", [
        ("head_dim", 16), ("intermediate_size", 160), ("max_position_embeddings", 128), ("num_hidden_layers", 3),
        ("rope_theta", 10000.0), ("sliding_window", 6), ("tie_word_embeddings", False), ("vocab_size", 128)])


def qwen2_config():
    # use_sliding_window with max_window_layers 1: layer 0 full, layers 1-2 sliding (window 6). Tied head.
    return base_config("Qwen2ForCausalLM", "qwen2", [
        ("intermediate_size", 128), ("max_position_embeddings", 128), ("max_window_layers", 1),
        ("num_hidden_layers", 3), ("rms_norm_eps", 1e-6), ("rope_scaling", None), ("rope_theta", 1000000.0),
        ("sliding_window", 6), ("tie_word_embeddings", True), ("use_sliding_window", True), ("vocab_size", 150)])


def qwen3_config():
    # head_dim 24: the heads span 96 dimensions of a 64-wide stream, as Qwen3's 128-wide heads do not divide
    # hidden_size evenly either. attention_bias on q/k/v and o_proj; layer 0 full, layers 1-2 sliding (window 6).
    return base_config("Qwen3ForCausalLM", "qwen3", [
        ("attention_bias", True), ("head_dim", 24), ("intermediate_size", 128), ("max_position_embeddings", 128),
        ("max_window_layers", 1), ("num_hidden_layers", 3), ("rms_norm_eps", 1e-6), ("rope_scaling", None),
        ("rope_theta", 1000000.0), ("sliding_window", 6), ("tie_word_embeddings", True), ("use_sliding_window", True),
        ("vocab_size", 150)])


def phi3_config():
    # GQA (k/v parts of qkv_proj smaller than q), partial rotary 0.5 (8 of 16 head dims rotate), window 7.
    return base_config("Phi3ForCausalLM", "phi3", [
        ("embd_pdrop", 0.0), ("intermediate_size", 96), ("max_position_embeddings", 128),
        ("num_hidden_layers", 2), ("original_max_position_embeddings", 128), ("pad_token_id", 0),
        ("partial_rotary_factor", 0.5), ("resid_pdrop", 0.0), ("rope_scaling", None), ("rope_theta", 10000.0),
        ("sliding_window", 7), ("tie_word_embeddings", False), ("vocab_size", 120)])


def weights(cfg, seed, fused):
    I = F.Init(seed)
    d, V, L, Fm = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or d // H
    sd = OrderedDict()
    sd["model.embed_tokens.weight"] = I.n((V, d))
    for i in range(L):
        p = f"model.layers.{i}."
        if fused:
            sd[p + "self_attn.qkv_proj.weight"] = I.n(((H + 2 * Hkv) * hd, d))
            sd[p + "mlp.gate_up_proj.weight"] = I.n((2 * Fm, d))
        else:
            sd[p + "self_attn.q_proj.weight"] = I.n((H * hd, d))
            sd[p + "self_attn.k_proj.weight"] = I.n((Hkv * hd, d))
            sd[p + "self_attn.v_proj.weight"] = I.n((Hkv * hd, d))
            if cfg["model_type"] == "qwen2" or cfg.get("attention_bias", False):
                sd[p + "self_attn.q_proj.bias"] = I.n((H * hd,), F.STD_B)
                sd[p + "self_attn.k_proj.bias"] = I.n((Hkv * hd,), F.STD_B)
                sd[p + "self_attn.v_proj.bias"] = I.n((Hkv * hd,), F.STD_B)
            if cfg["model_type"] == "qwen3":
                sd[p + "self_attn.q_norm.weight"] = I.norm_w(hd)
                sd[p + "self_attn.k_norm.weight"] = I.norm_w(hd)
            if cfg.get("attention_bias", False):
                sd[p + "self_attn.o_proj.bias"] = I.n((d,), F.STD_B)
            sd[p + "mlp.gate_proj.weight"] = I.n((Fm, d))
            sd[p + "mlp.up_proj.weight"] = I.n((Fm, d))
        sd[p + "self_attn.o_proj.weight"] = I.n((d, H * hd))
        sd[p + "mlp.down_proj.weight"] = I.n((d, Fm))
        sd[p + "input_layernorm.weight"] = I.norm_w(d)
        sd[p + "post_attention_layernorm.weight"] = I.norm_w(d)
    sd["model.norm.weight"] = I.norm_w(d)
    if not cfg.get("tie_word_embeddings", False):
        sd["lm_head.weight"] = I.n((V, d))
    return F._f32(sd)


FAMILIES = OrderedDict([
    ("mistral", (mistral_config, Mistral, 2001, False)),
    ("qwen2", (qwen2_config, Qwen2, 2002, False)),
    ("qwen3", (qwen3_config, Qwen3, 2004, False)),
    ("phi3", (phi3_config, Phi3, 2003, True)),
])


def as_llama(name, cfg, sd):
    """The same weights as a shared-generator Llama (separate projections, no window, full rotary): the
    family's reference with its differences switched off must reproduce the Llama reference exactly."""
    c = OrderedDict(cfg)
    c.pop("sliding_window", None)
    c["use_sliding_window"] = False
    c["partial_rotary_factor"] = 1.0
    c["_qk_norms"] = False  # Qwen3's; never written to a config.json
    mine = OrderedDict(sd)
    if name in ("qwen2", "qwen3"):
        mine = OrderedDict((k, torch.zeros_like(v) if k.endswith(".bias") else v) for k, v in sd.items())
    w = OrderedDict(mine)
    if name == "phi3":
        H, Hkv, Fm = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
        hd = c["hidden_size"] // H
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            qkv = w.pop(p + "self_attn.qkv_proj.weight")
            w[p + "self_attn.q_proj.weight"] = qkv[:H * hd]
            w[p + "self_attn.k_proj.weight"] = qkv[H * hd:(H + Hkv) * hd]
            w[p + "self_attn.v_proj.weight"] = qkv[(H + Hkv) * hd:]
            gu = w.pop(p + "mlp.gate_up_proj.weight")
            w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"] = gu[:Fm], gu[Fm:]
    return c, mine, w


def self_checks(name, cls, cfg, sd64, seqs, traces, jacs):
    positions = [MF.JAC_POS_FIRST, seqs[0][0].shape[0] - 1]
    model = cls(cfg, sd64)
    tr0, ctx0 = traces[0]
    out = OrderedDict()
    bad = 0  # nonzero pattern entries must be exactly the layer's mask
    for tr, _ in traces:
        for l in range(model.n_layers):
            pat = tr[f"blocks.{l}.attn.hook_pattern"]
            bad += int(((pat != 0) != model.mask(l, pat.shape[-1])[None]).sum())
    out["pattern_mask_mismatches"] = bad
    out["windowed_layers"] = [model.window(l) for l in range(model.n_layers)]
    out["jacobian_vs_central_fd"] = R.check_fd(model, tr0, ctx0, jacs, positions)[0]["max_rel_err"]
    out["chain_rule_rel_err"] = R.check_chain_rule(model, jacs, positions)
    with torch.no_grad():
        out["prefix_causality_max_abs"] = R.check_prefix_causality(model, seqs[0][0], seqs[0][1], tr0)
        out["layer_matrix_uniform_rel_err"] = R.check_layer_matrix_uniform(model, *seqs[0])
        # Independent anchor: with window, fused layout, partial rotary, q/k norms and biases switched off the reference
        # equals the shared generator's Llama on the same weights.
        c_l, w_mine, w_l = as_llama(name, cfg, sd64)
        ids = seqs[0][0]
        mine = cls(c_l, w_mine).forward(ids)[0]["logits"]
        llama = F.Llama(c_l, w_l).forward(ids)[0]["logits"]
        out["switched_off_vs_shared_llama_max_abs"] = R.max_abs(mine, llama)
    ok = (bad == 0 and out["jacobian_vs_central_fd"] < 1e-6 and out["chain_rule_rel_err"] < 1e-10
          and out["prefix_causality_max_abs"] < 1e-12 and out["layer_matrix_uniform_rel_err"] < 1e-12
          and out["switched_off_vs_shared_llama_max_abs"] < 1e-12 and any(w for w in out["windowed_layers"]))
    return ok, out


def main():
    failed = False
    for name, (make_cfg, cls, seed, fused) in FAMILIES.items():
        cfg = make_cfg()
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        sd = weights(cfg, seed, fused)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        sfio.save(sd, os.path.join(d, "model.safetensors"))
        sd_disk, _ = sfio.load(os.path.join(d, "model.safetensors"))
        sd64 = OrderedDict((k, v.to(torch.float64)) for k, v in sd_disk.items())
        model = cls(cfg, sd64)
        seqs = MF.make_inputs(name, cfg["vocab_size"], seed)
        refs, traces, jacs = MF.run_refs(model, seqs, with_jac=True)
        sfio.save(refs, os.path.join(d, "refs.safetensors"), metadata={"format": "pt", "dtype": "float64"})
        ok, checks = self_checks(name, cls, cfg, sd64, seqs, traces, jacs)
        print(f"[{name}] {'ok' if ok else 'SELF-CHECK FAILED'} {json.dumps(checks)}", flush=True)
        failed |= not ok
    sys.exit(1 if failed else 0)


main()
