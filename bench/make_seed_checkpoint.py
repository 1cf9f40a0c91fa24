#!/usr/bin/python3
"""Writes a random bf16 Hugging Face checkpoint directory with the published shapes of a model the papers study.

    make_seed_checkpoint.py --model {llama3.1-8b,olmo3-7b,gemma4-e4b} --out DIR [--layers N] [--seed S]
                            [--tokenizer PATH|none] [--shard-size 5GB] [--threads N] [--force] [--dry-run]
                            [--with-shared-kv (gemma4-e4b)] [--exact-rope (olmo3-7b)]

DIR gets config.json (only keys tdyn's config parser knows, with the published values), safetensors shards named
as save_pretrained names them (model-0000i-of-0000n.safetensors + model.safetensors.index.json, or one
model.safetensors when everything fits in one shard), a tokenizer and seed_checkpoint.json (how it was made, and
where it departs from the published config). Weights are N(0, 0.02), norm scales 1, Gemma's layer_scalar 1,
rounded to bf16 (nearest, ties to even) and written tensor by tensor in chunks: memory stays at a few chunks
whatever the model size. The values depend only on --seed, the tensor's name and its shape, not on --threads.

--layers N keeps the first N layers' settings (layer_types truncated). Gemma 4 E4B is rebuilt so that KV sharing
still happens: num_kv_shared_layers scales as round(18 N / 42) (at least 1 when N >= 2), the last layer that owns
its keys/values is a full-attention layer (as layer 23 is in the published model), and a shared layer whose type
has no earlier owner becomes full-attention.

The default tokenizer is the GPT-2 one in ../shared/tokenizers/gpt2 (tokenizer.json if present, otherwise
encoder.json + vocab.bpe): the ids it encodes are < 50257, valid for every vocabulary here. Its vocabulary is padded
to the model's with placeholder pieces <|seed_pad_ID|> (never produced by encoding), so that `tdyn run` can print
any id the random model generates. The text is of course not what the real tokenizer would make, which does not
matter for timing and memory.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STD = 0.02
CHUNK = 1 << 22  # elements per generated chunk (16 MiB of float32)
MARKER = "seed_checkpoint.json"


# ---------------------------------------------------------------------------------------------------------------
# Published configurations, restricted to the keys tdyn accepts (src/model/config.cpp), and tensor tables in the
# order the HF modules register their parameters (which decides the shard a tensor lands in).

def llama31_8b(n_layers, opts):
    """meta-llama/Llama-3.1-8B (LlamaForCausalLM)."""
    published = 32
    config = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 14336,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_hidden_layers": n_layers,
        "num_key_value_heads": 8,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": 128256,
    }
    d, v, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    hd = d // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    t = [("model.embed_tokens.weight", (v, d), "normal")]
    for l in range(n_layers):
        p = f"model.layers.{l}."
        t += [(p + "self_attn.q_proj.weight", (q, d), "normal"), (p + "self_attn.k_proj.weight", (kv, d), "normal"),
              (p + "self_attn.v_proj.weight", (kv, d), "normal"), (p + "self_attn.o_proj.weight", (d, q), "normal"),
              (p + "mlp.gate_proj.weight", (f, d), "normal"), (p + "mlp.up_proj.weight", (f, d), "normal"),
              (p + "mlp.down_proj.weight", (d, f), "normal"), (p + "input_layernorm.weight", (d,), "ones"),
              (p + "post_attention_layernorm.weight", (d,), "ones")]
    t += [("model.norm.weight", (d,), "ones"), ("lm_head.weight", (v, d), "normal")]
    notes = [] if n_layers == published else [f"num_hidden_layers {n_layers} (published {published})"]
    return config, t, notes


def olmo3_7b(n_layers, opts):
    """allenai/Olmo-3-1025-7B (Olmo3ForCausalLM): no GQA (32 KV heads), 3 sliding-window layers then 1 full."""
    published = 32
    types = [("sliding_attention" if (l + 1) % 4 else "full_attention") for l in range(published)][:n_layers]
    config = {
        "architectures": ["Olmo3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "eos_token_id": 100257,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 11008,
        "layer_types": types,
        "max_position_embeddings": 65536,
        "model_type": "olmo3",
        "num_attention_heads": 32,
        "num_hidden_layers": n_layers,
        "num_key_value_heads": 32,
        "pad_token_id": 100277,
        "rms_norm_eps": 1e-06,
        "rope_theta": 500000,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": 100278,
    }
    yarn = {"attention_factor": 1.2079441541679836, "beta_fast": 32, "beta_slow": 1, "factor": 8.0,
            "original_max_position_embeddings": 8192, "rope_type": "yarn"}
    notes = []
    if opts.exact_rope:
        config["rope_scaling"] = yarn
        notes.append("rope_scaling is the published YaRN block, which tdyn does not implement (it refuses the config)")
    else:
        notes.append("rope_scaling left out: the published one is YaRN " + json.dumps(yarn, sort_keys=True) +
                     " (full-attention layers), which tdyn does not implement; full layers use plain RoPE theta 5e5. "
                     "Shapes and cost are unchanged. --exact-rope writes it anyway")
    if n_layers != published:
        notes.append(f"num_hidden_layers {n_layers} (published {published}); layer_types = the first {n_layers}")
    d, v, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    hd = d // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    t = [("model.embed_tokens.weight", (v, d), "normal")]
    for l in range(n_layers):
        p = f"model.layers.{l}."
        t += [(p + "self_attn.q_proj.weight", (q, d), "normal"), (p + "self_attn.k_proj.weight", (kv, d), "normal"),
              (p + "self_attn.v_proj.weight", (kv, d), "normal"), (p + "self_attn.o_proj.weight", (d, q), "normal"),
              (p + "self_attn.q_norm.weight", (q,), "ones"), (p + "self_attn.k_norm.weight", (kv,), "ones"),
              (p + "post_attention_layernorm.weight", (d,), "ones"), (p + "mlp.gate_proj.weight", (f, d), "normal"),
              (p + "mlp.up_proj.weight", (f, d), "normal"), (p + "mlp.down_proj.weight", (d, f), "normal"),
              (p + "post_feedforward_layernorm.weight", (d,), "ones")]
    t += [("model.norm.weight", (d,), "ones"), ("lm_head.weight", (v, d), "normal")]
    return config, t, notes


GEMMA4_E4B_LAYERS, GEMMA4_E4B_SHARED = 42, 18


def gemma4_layer_plan(n_layers):
    """(layer_types, num_kv_shared_layers) of Gemma 4 E4B cut to n_layers, KV sharing kept (see the module doc)."""
    published = [("full_attention" if l % 6 == 5 else "sliding_attention") for l in range(GEMMA4_E4B_LAYERS)]
    if n_layers == GEMMA4_E4B_LAYERS:
        return published, GEMMA4_E4B_SHARED
    shared = round(GEMMA4_E4B_SHARED * n_layers / GEMMA4_E4B_LAYERS)
    shared = min(max(shared, 1 if n_layers >= 2 else 0), n_layers - 1)
    own = n_layers - shared
    own_types = published[:own]
    own_types[-1] = "full_attention"
    shared_types = published[GEMMA4_E4B_LAYERS - shared:]
    shared_types = [ty if ty in own_types else "full_attention" for ty in shared_types]
    return own_types + shared_types, shared


def gemma4_e4b(n_layers, opts):
    """google/gemma-4-E4B (Gemma4ForConditionalGeneration), text model only; the vision/audio towers are left out."""
    types, n_shared = gemma4_layer_plan(n_layers)
    text = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_k_eq_v": False,
        "bos_token_id": 2,
        "enable_moe_block": False,
        "eos_token_id": 1,
        "final_logit_softcapping": 30.0,
        "global_head_dim": 512,
        "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 2560,
        "hidden_size_per_layer_input": 256,
        "initializer_range": 0.02,
        "intermediate_size": 10240,
        "layer_types": types,
        "max_position_embeddings": 131072,
        "model_type": "gemma4_text",
        "moe_intermediate_size": None,
        "num_attention_heads": 8,
        "num_experts": None,
        "num_global_key_value_heads": None,
        "num_hidden_layers": n_layers,
        "num_key_value_heads": 2,
        "num_kv_shared_layers": n_shared,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
        "sliding_window": 512,
        "tie_word_embeddings": True,
        "top_k_experts": None,
        "use_bidirectional_attention": None,
        "use_cache": True,
        "use_double_wide_mlp": False,
        "vocab_size": 262144,
        "vocab_size_per_layer_input": 262144,
    }
    config = {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "audio_config": None,
        "audio_token_id": 258881,
        "boa_token_id": 256000,
        "boi_token_id": 255999,
        "dtype": "bfloat16",
        "eoa_token_index": 258883,
        "eoi_token_id": 258882,
        "image_token_id": 258880,
        "initializer_range": 0.02,
        "model_type": "gemma4",
        "text_config": text,
        "tie_word_embeddings": True,
        "video_token_id": 258884,
        "vision_config": None,
    }
    notes = ["text model only: vision_config / audio_config are null and their towers are not written "
             "(tdyn does not run them)"]
    if n_layers != GEMMA4_E4B_LAYERS:
        notes.append(f"num_hidden_layers {n_layers} (published {GEMMA4_E4B_LAYERS}), num_kv_shared_layers {n_shared} "
                     f"(published {GEMMA4_E4B_SHARED}), layer_types rebuilt to keep KV sharing")
    if opts.with_shared_kv:
        notes.append("KV-shared layers also carry k_proj / v_proj / k_norm (never used), as Google's upload does; "
                     "save_pretrained leaves them out")

    d, v, ple = text["hidden_size"], text["vocab_size"], text["hidden_size_per_layer_input"]
    heads, kv_heads, f = text["num_attention_heads"], text["num_key_value_heads"], text["intermediate_size"]
    first_shared = n_layers - n_shared
    pre = "model.language_model."
    t = [(pre + "embed_tokens.weight", (v, d), "normal")]
    for l in range(n_layers):
        hd = text["global_head_dim"] if types[l] == "full_attention" else text["head_dim"]
        width = 2 * f if (text["use_double_wide_mlp"] and l >= first_shared) else f
        own_kv = l < first_shared or opts.with_shared_kv
        p = f"{pre}layers.{l}."
        t += [(p + "self_attn.q_proj.weight", (heads * hd, d), "normal")]
        if own_kv:
            t += [(p + "self_attn.k_proj.weight", (kv_heads * hd, d), "normal"),
                  (p + "self_attn.v_proj.weight", (kv_heads * hd, d), "normal")]
        t += [(p + "self_attn.o_proj.weight", (d, heads * hd), "normal"), (p + "self_attn.q_norm.weight", (hd,), "ones")]
        if own_kv:
            t += [(p + "self_attn.k_norm.weight", (hd,), "ones")]
        t += [(p + "mlp.gate_proj.weight", (width, d), "normal"), (p + "mlp.up_proj.weight", (width, d), "normal"),
              (p + "mlp.down_proj.weight", (d, width), "normal"), (p + "input_layernorm.weight", (d,), "ones"),
              (p + "post_attention_layernorm.weight", (d,), "ones"),
              (p + "pre_feedforward_layernorm.weight", (d,), "ones"),
              (p + "post_feedforward_layernorm.weight", (d,), "ones"),
              (p + "per_layer_input_gate.weight", (ple, d), "normal"),
              (p + "per_layer_projection.weight", (d, ple), "normal"),
              (p + "post_per_layer_input_norm.weight", (d,), "ones"), (p + "layer_scalar", (1,), "ones")]
    t += [(pre + "norm.weight", (d,), "ones"),
          (pre + "embed_tokens_per_layer.weight", (text["vocab_size_per_layer_input"], n_layers * ple), "normal"),
          (pre + "per_layer_model_projection.weight", (n_layers * ple, d), "normal"),
          (pre + "per_layer_projection_norm.weight", (ple,), "ones")]
    return config, t, notes


MODELS = {
    "llama3.1-8b": (llama31_8b, 32),
    "olmo3-7b": (olmo3_7b, 32),
    "gemma4-e4b": (gemma4_e4b, GEMMA4_E4B_LAYERS),
}


# ---------------------------------------------------------------------------------------------------------------
# Values.

def to_bf16(x):
    """float32 array -> its bf16 bit patterns (uint16), rounded to nearest, ties to even. Overwrites x."""
    u = x.view(np.uint32)
    bias = u >> 16
    bias &= 1
    bias += 0x7FFF
    u += bias
    return x.view(np.uint16)[1::2].copy()  # high halves (little-endian)


def chunk_bytes(seed, name, shape, init, k):
    """The bf16 bytes of elements [k * CHUNK, (k + 1) * CHUNK) of a tensor."""
    numel = math.prod(shape)
    n = min(CHUNK, numel - k * CHUNK)
    if init == "ones":
        return np.full(n, 0x3F80, np.uint16).tobytes()
    key = zlib.crc32(f"{name}:{'x'.join(map(str, shape))}".encode())
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, key, k])))
    x = np.empty(n, np.float32)
    rng.standard_normal(out=x, dtype=np.float32)
    x *= np.float32(STD)
    return to_bf16(x).tobytes()


# ---------------------------------------------------------------------------------------------------------------
# Layout: shards as huggingface_hub's split_state_dict_into_shards_factory makes them (tensors in registration
# order; a new shard when the next tensor would push the current one past the limit; a tensor larger than the
# limit alone in a shard), safetensors files as the safetensors library writes them (header sorted by name, padded
# with spaces to 8 bytes, data in header order).

def parse_size(text):
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
    s = text.strip().upper()
    digits = s.rstrip("KMGIB")
    unit = s[len(digits):]
    if unit not in units or not digits:
        raise argparse.ArgumentTypeError(f"size '{text}': expected e.g. 5GB, 500MB or a byte count")
    return int(float(digits) * units[unit])


def plan_shards(tensors, max_bytes):
    shards, current, size = [], [], 0
    for t in tensors:
        nbytes = math.prod(t[1]) * 2
        if nbytes > max_bytes:  # a tensor above the limit gets a shard of its own, the current one stays open
            shards.append([t])
            continue
        if current and size + nbytes > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(t)
        size += nbytes
    if current:
        shards.append(current)
    return shards


def header_bytes(shard):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in sorted(shard):
        nbytes = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def write_shard(path, shard, seed, pool, threads, progress):
    jobs = [(name, shape, init, k) for name, shape, init in sorted(shard)
            for k in range(math.ceil(math.prod(shape) / CHUNK))]
    window = 2 * threads
    with open(path, "wb") as f:
        f.write(header_bytes(shard))
        pending = []
        for job in jobs:
            pending.append(pool.submit(chunk_bytes, seed, *job))
            if len(pending) >= window:
                data = pending.pop(0).result()
                f.write(data)
                progress(len(data))
        for fut in pending:
            data = fut.result()
            f.write(data)
            progress(len(data))


# ---------------------------------------------------------------------------------------------------------------

PAD_PIECE = "<|seed_pad_{}|>"


def padded_vocab(vocab, size, where):
    """vocab ({piece: id}) with placeholder pieces for the ids up to size - 1 it lacks; the count added."""
    have = set(vocab.values())
    missing = [i for i in range(size) if i not in have]
    for i in missing:
        piece = PAD_PIECE.format(i)
        if piece in vocab:
            sys.exit(f"error: {where} already has a piece '{piece}'")
        vocab[piece] = i
    return len(missing)


def copy_tokenizer(arg, out, vocab_size):
    """Copies the tokenizer into out, its vocabulary padded to vocab_size; returns a description.

    A tokenizer smaller than the model's vocabulary encodes text fine, but `tdyn run` cannot decode what a random
    model generates (any id below vocab_size): the padding gives every missing id a placeholder piece,
    <|seed_pad_ID|>, which no merge produces, so encoding is unchanged."""
    if arg == "none":
        return "none"
    if arg is None:
        gpt2 = os.path.normpath(os.path.join(REPO, "..", "shared", "tokenizers", "gpt2"))
        arg = os.path.join(gpt2, "tokenizer.json")
        if not os.path.isfile(arg):
            arg = os.path.join(gpt2, "encoder.json")
        if not os.path.isfile(arg):
            print(f"note: no default tokenizer in {gpt2}; the checkpoint has none (tdyn run needs --ids)")
            return "none"
    arg = os.path.abspath(arg)
    if os.path.isdir(arg):
        names = [n for n in ("tokenizer.json", "encoder.json") if os.path.isfile(os.path.join(arg, n))]
        if not names:
            sys.exit(f"error: {arg} holds neither tokenizer.json nor encoder.json")
        arg = os.path.join(arg, names[0])
    base, folder = os.path.basename(arg), os.path.dirname(arg)
    if base == "tokenizer.json":
        with open(arg, encoding="utf-8") as f:
            tok = json.load(f)
        model = tok.get("model") or {}
        if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
            shutil.copyfile(arg, os.path.join(out, base))
            return f"{arg} (copied as is: only a BPE vocabulary is padded)"
        for t in tok.get("added_tokens") or []:
            model["vocab"].setdefault(t["content"], t["id"])
        added = padded_vocab(model["vocab"], vocab_size, arg)
        with open(os.path.join(out, base), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        return f"{arg}, {added} placeholder pieces added" if added else arg
    if base not in ("encoder.json", "vocab.bpe"):
        sys.exit(f"error: --tokenizer {arg}: expected a tokenizer.json, or GPT-2's encoder.json / vocab.bpe pair")
    encoder, merges = os.path.join(folder, "encoder.json"), os.path.join(folder, "vocab.bpe")
    for path in (encoder, merges):
        if not os.path.isfile(path):
            sys.exit(f"error: tokenizer file {path} is missing")
    with open(encoder, encoding="utf-8") as f:
        vocab = json.load(f)
    added = padded_vocab(vocab, vocab_size, encoder)
    with open(os.path.join(out, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    shutil.copyfile(merges, os.path.join(out, "vocab.bpe"))
    return f"{encoder} + {merges}" + (f", {added} placeholder pieces added" if added else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--out", required=True, help="output directory (must not exist, unless --force)")
    ap.add_argument("--layers", type=int, help="number of layers (default: the published depth)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", help="tokenizer.json, GPT-2 encoder.json/vocab.bpe, a directory of one, or 'none'")
    ap.add_argument("--shard-size", type=parse_size, default=parse_size("5GB"), help="largest shard (default 5GB)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--with-shared-kv", action="store_true",
                    help="gemma4-e4b: also write k/v projections and k_norm for KV-shared layers (unused)")
    ap.add_argument("--exact-rope", action="store_true",
                    help="olmo3-7b: write the published YaRN rope_scaling (tdyn refuses it)")
    ap.add_argument("--force", action="store_true", help="replace DIR if it is an earlier output of this script")
    ap.add_argument("--dry-run", action="store_true", help="print the plan (sizes, shards, notes) and write nothing")
    opts = ap.parse_args()

    if sys.byteorder != "little":
        sys.exit("error: the bf16 conversion assumes a little-endian machine")
    build, published = MODELS[opts.model]
    n_layers = published if opts.layers is None else opts.layers
    if not 1 <= n_layers <= published:
        sys.exit(f"error: --layers must be in [1, {published}] for {opts.model}")
    if opts.with_shared_kv and opts.model != "gemma4-e4b":
        sys.exit("error: --with-shared-kv is for gemma4-e4b")
    if opts.exact_rope and opts.model != "olmo3-7b":
        sys.exit("error: --exact-rope is for olmo3-7b")
    out = os.path.abspath(opts.out)
    if os.path.exists(out):
        if not opts.force:
            sys.exit(f"error: {out} exists (--force replaces an earlier output of this script)")
        if not os.path.isfile(os.path.join(out, MARKER)):
            sys.exit(f"error: {out} exists and has no {MARKER}: not replacing it")

    config, tensors, notes = build(n_layers, opts)
    names = [t[0] for t in tensors]
    assert len(set(names)) == len(names), "duplicate tensor name"
    params = sum(math.prod(t[1]) for t in tensors)
    nbytes = 2 * params
    shards = plan_shards(tensors, opts.shard_size)
    print(f"{opts.model}: {n_layers} layers, {len(tensors)} tensors, {params:,} parameters, {nbytes / 1e9:.2f} GB bf16 "
          f"in {len(shards)} shard(s) -> {out}")
    for n in notes:
        print(f"note: {n}")
    if opts.dry_run:
        for i, shard in enumerate(shards):
            print(f"  shard {i + 1}: {len(shard)} tensors, {sum(math.prod(t[1]) for t in shard) * 2 / 1e9:.2f} GB")
        return

    tmp = f"{out}.partial-{os.getpid()}"
    os.makedirs(tmp)
    start, done, last = time.perf_counter(), [0], [0.0]

    def progress(n):
        done[0] += n
        now = time.perf_counter() - start
        if now - last[0] >= 5 or done[0] == nbytes:
            last[0] = now
            print(f"  {done[0] / 1e9:6.2f} / {nbytes / 1e9:.2f} GB  {now:6.1f} s  {done[0] / 1e6 / max(now, 1e-9):6.0f} MB/s",
                  flush=True)

    try:
        files = (["model.safetensors"] if len(shards) == 1 else
                 [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
        with ThreadPoolExecutor(max_workers=max(1, opts.threads)) as pool:
            for file, shard in zip(files, shards):
                write_shard(os.path.join(tmp, file), shard, opts.seed, pool, max(1, opts.threads), progress)
        if len(shards) > 1:
            index = {"metadata": {"total_size": nbytes},
                     "weight_map": {name: file for file, shard in zip(files, shards) for name, _, _ in shard}}
            with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
                json.dump(index, f, indent=2, sort_keys=True)
                f.write("\n")
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
            f.write("\n")
        text = config.get("text_config", config)
        tokenizer = copy_tokenizer(opts.tokenizer, tmp, text["vocab_size"])
        seconds = time.perf_counter() - start
        info = {
            "generator": "bench/make_seed_checkpoint.py",
            "model": opts.model,
            "layers": n_layers,
            "published_layers": published,
            "seed": opts.seed,
            "init": f"N(0, {STD}) for matrices and embeddings, 1 for norm scales and layer_scalar; bf16 round-to-nearest-even",
            "parameters": params,
            "tensor_bytes": nbytes,
            "shards": files,
            "tokenizer": tokenizer,
            "notes": notes,
            "seconds": round(seconds, 2),
        }
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump(info, f, indent=2)
            f.write("\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.exists(out):
        shutil.rmtree(out)
    os.rename(tmp, out)
    disk = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    print(f"wrote {params:,} parameters, {nbytes:,} tensor bytes ({disk / 1e9:.2f} GB on disk) in {seconds:.1f} s "
          f"({nbytes / 1e6 / seconds:.0f} MB/s); tokenizer: {tokenizer}")


if __name__ == "__main__":
    main()
