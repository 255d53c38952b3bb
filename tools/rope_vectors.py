#!/usr/bin/env python3
"""RoPE reference vectors from the models' own code, for kvfabric's presets.

  python tools/rope_vectors.py --generate crates/store/tests/data/rope_vectors.json
  python tools/rope_vectors.py --check crates/store/tests/data/rope_vectors.json

Builds every model of tools/rope_models.json (published config.json values: every RoPE key
kept, layers / hidden size / experts / vocabulary shrunk) with transformers' own config and
model classes and small random weights, then runs the model's own rotary embedding and its
own apply-rotary function:

- MLA (DeepSeek-V2, V3, Kimi K2, MiniCPM3): `model.model.rotary_emb` over the 64 positions of
  a block starting at P (so a LongRoPE model picks its factor set for a sequence ending with
  that block, as its `dynamic_rope_update` does), applied to fixed bf16 rows with the
  module-level apply function the model's attention calls.
- DeepSeek-V4 (Pro, Flash): the layer's own compressor (`DeepseekV4HCACompressor`,
  `DeepseekV4CSACompressor` with its `DeepseekV4Indexer`) on one block of 128 tokens whose
  first token sits at P (the cache's `entry_count` says where, as the model tracks it). A
  forward hook on each `kv_norm` substitutes fixed bf16 entries for the pooled ones, so the
  vectors do not depend on the pooling arithmetic; the positions and the rotation are the
  compressor's own.

Values are float32, written as 8 hex digits of their IEEE-754 bits. `--check` regenerates and
compares: structure, positions and inputs exactly, the model's float32 outputs within 4 float32
ulps of the row's largest magnitude (torch's vectorised cos/sin/pow may differ by an ulp
between CPUs). Needs torch and transformers 5.20.x (vllm 0.33 pins transformers < 5.21; 5.20
has DeepseekV2/V3/V4 and MiniCPM3). Run in the environment `.ci/run` uses.
"""

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.cache_utils import DynamicCache
from transformers.models.deepseek_v2 import modeling_deepseek_v2 as ds2
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds3
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as ds4
from transformers.models.minicpm3 import modeling_minicpm3 as mc3

MODELS = Path(__file__).with_name("rope_models.json")
MLA_BLOCK_TOKENS = 64
SEED = 20261116

# Everything but RoPE and the layer map, shrunk: the rotary embedding does not depend on it.
SHRINK_MLA = {
    "num_hidden_layers": 1,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "q_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "vocab_size": 64,
}
SHRINK_MOE = {
    "moe_intermediate_size": 32,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
}
SHRINK_V4 = {
    "hidden_size": 64,
    "moe_intermediate_size": 32,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "num_attention_heads": 2,
    "q_lora_rank": 32,
    "o_groups": 1,
    "o_lora_rank": 32,
    "index_n_heads": 2,
    "index_topk": 8,
    "hc_mult": 2,
    "num_hash_layers": 0,
    "vocab_size": 64,
}


def f32_hex(v):
    return struct.pack(">f", float(v)).hex()


def from_hexes(s):
    return [struct.unpack(">f", bytes.fromhex(s[i : i + 8]))[0] for i in range(0, len(s), 8)]


def hexes(t):
    """A row of float32 values as one string: 8 hex digits (IEEE-754 bits) per value."""
    return "".join(f32_hex(v) for v in t.detach().to(torch.float32).reshape(-1).tolist())


def bf16_rows(rng, rows, dims):
    """Fixed rows of bf16-representable values (what a bf16 engine cache holds)."""
    x = torch.tensor(rng.standard_normal((rows, dims)), dtype=torch.float32)
    return x.to(torch.bfloat16).to(torch.float32)


def mla_config(entry):
    cfg = dict(entry["config"])
    scaling = dict(cfg["rope_scaling"])
    if entry.get("variant") == "long-factors-doubled":
        scaling["long_factor"] = [2.0 * f for f in scaling["short_factor"]]
    cfg["rope_scaling"] = scaling
    cfg.update(SHRINK_MLA)
    if entry["class"] == "deepseek_v2":
        cfg.update(SHRINK_MOE)
        return transformers.DeepseekV2Config(**cfg), transformers.DeepseekV2ForCausalLM
    if entry["class"] == "deepseek_v3":
        cfg.update(SHRINK_MOE)
        return transformers.DeepseekV3Config(**cfg), transformers.DeepseekV3ForCausalLM
    if entry["class"] == "minicpm3":
        # transformers 5.20's MiniCPM3Attention reads rope_parameters["factor"] for any scaled
        # RoPE and MiniCPM3's config has none: give the value its LongRoPE code derives when
        # the key is absent (max_position_embeddings / original_max_position_embeddings).
        scaling.setdefault(
            "factor",
            cfg["max_position_embeddings"] / scaling["original_max_position_embeddings"],
        )
        return transformers.MiniCPM3Config(**cfg), transformers.MiniCPM3ForCausalLM
    raise SystemExit(f"unknown class {entry['class']}")


def mla_rotate(entry, config, rotary, k, positions):
    """The model's own rotary embedding and apply function; rows in the cache's dim order.

    DeepSeek-V3's `apply_rotary_pos_emb_interleave` rotates the checkpoint's adjacent pairs
    (2i, 2i+1) and returns them de-interleaved (first all even dims, then all odd ones);
    vLLM's cache (`is_neox_style=False`) and kvfabric keep the checkpoint's order, so its
    output is re-interleaved by index here (no arithmetic).
    """
    pos = positions[None, :]
    if entry["class"] == "deepseek_v2":
        freqs_cis = rotary(k, pos)
        _, out = ds2.apply_rotary_emb(k, k, freqs_cis)
        return out
    cos, sin = rotary(k, pos)
    if entry["class"] == "deepseek_v3":
        assert config.rope_interleave, "DeepSeek-V3 checkpoints ship interleaved RoPE weights"
        _, out = ds3.apply_rotary_pos_emb_interleave(k, k, cos, sin)
        half = out.shape[-1] // 2
        return torch.stack((out[..., :half], out[..., half:]), dim=-1).flatten(-2)
    _, out = mc3.apply_rotary_pos_emb(k, k, cos, sin)
    return out


def mla_blocks(max_pos, original):
    starts = {
        0,
        1,
        64,
        1000,
        100_000,
        original - 64,
        original - 63,
        original,
        max_pos - 64,
    }
    return sorted(p for p in starts if 0 <= p <= max_pos - MLA_BLOCK_TOKENS + 1)


def mla_entry(entry, rng):
    config, model_class = mla_config(entry)
    model = model_class(config).eval()
    rotary = model.model.rotary_emb
    dims = config.qk_rope_head_dim
    scaling = config.rope_parameters
    x = bf16_rows(rng, 2, dims)
    rows = [0, MLA_BLOCK_TOKENS - 1]
    k = torch.zeros(1, 1, MLA_BLOCK_TOKENS, dims)
    k[0, 0, rows] = x
    blocks = []
    for p in mla_blocks(
        config.max_position_embeddings, scaling["original_max_position_embeddings"]
    ):
        positions = torch.arange(p, p + MLA_BLOCK_TOKENS)
        with torch.no_grad():
            out = mla_rotate(entry, config, rotary, k, positions)
        if p == 0:
            # Angle 0 is the identity: the re-interleaved output is the input, bit for bit.
            assert torch.equal(out[0, 0, 0], x[0]), entry["preset"]
        # The frequencies in effect for this block (LongRoPE: the set the model picked).
        blocks.append(
            {
                "position": p,
                "inv_freq": hexes(rotary.inv_freq),
                "out": [hexes(out[0, 0, r]) for r in rows],
            }
        )
    doc = {
        "preset": entry["preset"],
        "source": entry["source"],
        "model_class": model_class.__name__,
        "rope_dim": dims,
        "max_position_embeddings": config.max_position_embeddings,
        "rope_parameters": scaling,
        "attention_scaling": float(rotary.attention_scaling),
        "inv_freq": hexes(rotary.inv_freq),
        "rows": rows,
        "x": [hexes(r) for r in x],
        "blocks": blocks,
    }
    if "variant" in entry:
        doc["variant"] = entry["variant"]
        doc["about"] = entry["about"]
    return doc


def v4_config(entry, layers):
    cfg = dict(entry["config"])
    ratios = cfg["compress_ratios"][:layers]
    cfg.update(SHRINK_V4)
    cfg["num_hidden_layers"] = layers
    cfg["compress_ratios"] = ratios
    return transformers.DeepseekV4Config(**cfg)


class Substitute:
    """A forward hook on a compressor's `kv_norm`: its output replaced by fixed rows."""

    def __init__(self, rows):
        self.rows = rows

    def __call__(self, module, args, output):
        return self.rows[None].to(output.dtype).expand_as(output).clone()


def v4_compressed(entry, rng):
    """One HCA and one CSA layer of the model, run by their own compressor classes."""
    layers = entry["config"]["compress_ratios"][:-1]
    first_hca, first_csa = layers.index(128), layers.index(4)
    config = v4_config(entry, max(first_hca, first_csa) + 1)
    model = transformers.DeepseekV4ForCausalLM(config).eval()
    block = config.compress_rates["heavily_compressed_attention"]
    out = []
    for layer in (first_hca, first_csa):
        attn = model.model.layers[layer].self_attn
        comp = attn.compressor
        ratio = comp.compress_rate
        windows = block // ratio
        rope = 2 * comp.rotary_emb.compress_inv_freq.shape[0]
        canon = bf16_rows(rng, windows, comp.head_dim)
        hooks = [comp.kv_norm.register_forward_hook(Substitute(canon))]
        index_canon = None
        if attn.layer_type == "compressed_sparse_attention":
            index_canon = bf16_rows(rng, windows, comp.indexer.head_dim)
            hooks.append(comp.indexer.kv_norm.register_forward_hook(Substitute(index_canon)))
        rows = [0, windows - 1]
        orig = config.rope_parameters["compress"]["original_max_position_embeddings"]
        starts = [0, block, orig - block, orig, config.max_position_embeddings - block]
        for p in starts:
            cache = DynamicCache(config=config)
            cache_layer = cache.layers[layer]
            for name in cache_layer.entry_count:
                cache_layer.entry_count[name] = p // ratio
            hidden = torch.tensor(
                rng.standard_normal((1, block, config.hidden_size)), dtype=torch.float32
            )
            q_res = torch.tensor(
                rng.standard_normal((1, block, config.q_lora_rank)), dtype=torch.float32
            )
            position_ids = torch.arange(p, p + block)[None]
            with torch.no_grad():
                kv, _ = comp(hidden, q_res, position_ids, cache, layer)
            kv = kv[0, 0]
            assert kv.shape[0] == windows
            # Only the trailing `rope` dims turn; the others are the substituted entry.
            assert torch.equal(kv[:, :-rope], canon[:, :-rope])
            case = {
                "scheme": "hca" if ratio == block else "csa",
                "layer": layer,
                "position": p,
                "rows": rows,
                "canonical": [hexes(canon[r, -rope:]) for r in rows],
                "out": [hexes(kv[r, -rope:]) for r in rows],
            }
            if index_canon is not None:
                keys = cache_layer.compressed_kv["indexer"][0]
                assert torch.equal(keys[:, :-rope], index_canon[:, :-rope])
                case["indexer_canonical"] = [hexes(index_canon[r]) for r in rows]
                case["indexer_out"] = [hexes(keys[r]) for r in rows]
            out.append(case)
        for h in hooks:
            h.remove()
    return config, model, out


def hybrid_entry(entry, rng):
    full = v4_config(entry, entry["config"]["num_hidden_layers"])
    config, model, compressed = v4_compressed(entry, rng)
    rotary = model.model.rotary_emb
    attn_rope = {}
    for layer in model.model.layers:
        attn_rope[layer.self_attn.layer_type] = layer.self_attn.rope_layer_type
    # Sliding-window-only layers: the model's own attention class, built for such a layer.
    swa_config = v4_config({"config": {**entry["config"], "compress_ratios": [0, 0]}}, 1)
    attn_rope["sliding_attention"] = ds4.DeepseekV4Attention(swa_config, 0).rope_layer_type
    ropes = {}
    for name in rotary.layer_types:
        ropes[name] = {
            "rope_parameters": config.rope_parameters[name],
            "attention_scaling": float(getattr(rotary, f"{name}_attention_scaling")),
            "inv_freq": hexes(getattr(rotary, f"{name}_inv_freq")),
        }
    return {
        "preset": entry["preset"],
        "source": entry["source"],
        "model_class": type(model).__name__,
        "layer_types": full.layer_types,
        "rope_of_layer_type": attn_rope,
        "head_dim": config.head_dim,
        "rope_dim": config.qk_rope_head_dim,
        "index_head_dim": config.index_head_dim,
        "compress_rates": config.compress_rates,
        "sliding_window": config.sliding_window,
        "ropes": ropes,
        "compressed": compressed,
    }


def generate():
    torch.manual_seed(SEED)
    rng = np.random.RandomState(SEED)
    models = json.loads(MODELS.read_text())
    return {
        "about": (
            "RoPE of every preset as the models' own transformers classes compute it "
            "(tools/rope_vectors.py from tools/rope_models.json; read by "
            "crates/store/tests/rope_vectors.rs). float32 values are 8 hex digits of their "
            "IEEE-754 bits. MLA: `x` are a block's rows `rows` at angle 0, `blocks[].out` the "
            "same rows rotated by the model for a block whose first token is at `position`, in "
            "the cache's dim order. Hybrid: per compressed layer, entries `rows` of a block at "
            "`position` before (`canonical`) and after (`out`) the compressor's rotation; "
            "`canonical`/`out` are the entry's trailing RoPE dims, `indexer_*` the whole CSA "
            "indexer key."
        ),
        "generator": {
            "script": "tools/rope_vectors.py",
            "transformers": transformers.__version__,
            "torch": torch.__version__.split("+")[0],
        },
        "mla": [mla_entry(e, rng) for e in models["mla"]],
        "hybrid": [hybrid_entry(e, rng) for e in models["hybrid"]],
    }


def dump(doc):
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


FLOATS = ("out", "indexer_out", "inv_freq")


def close(path, a, b, errors):
    """The model's float32 outputs agree within 4 float32 ulps of the row's largest value."""
    va, vb = from_hexes(a), from_hexes(b)
    if len(va) != len(vb):
        errors.append(f"{path}: {len(va)} values != {len(vb)}")
        return
    scale = max((abs(v) for v in va), default=0.0)
    scale = max(scale, 1e-30)
    ulp = math.ldexp(1.0, math.frexp(scale)[1] - 24)
    worst = max(abs(x - y) for x, y in zip(va, vb, strict=True))
    if worst > 4 * ulp:
        errors.append(f"{path}: differs by {worst:.3g} (> 4 float32 ulps of {scale:.3g})")


def compare(path, a, b, errors, floats=False):
    """Exact, except the model's float32 outputs (`FLOATS` keys), compared by `close`."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            errors.append(f"{path}: keys {sorted(a)} != {sorted(b)}")
            return
        for k in a:
            compare(f"{path}.{k}", a[k], b[k], errors, k in FLOATS)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            compare(f"{path}[{i}]", x, y, errors, floats)
    elif floats and isinstance(a, str) and isinstance(b, str):
        close(path, a, b, errors)
    elif a != b:
        errors.append(f"{path}: {str(a)[:80]} != {str(b)[:80]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--generate", metavar="FILE", help="write the vectors to FILE ('-': stdout)")
    g.add_argument("--check", metavar="FILE", help="regenerate and compare with FILE")
    args = ap.parse_args()
    doc = generate()
    if args.generate:
        if args.generate == "-":
            sys.stdout.write(dump(doc))
        else:
            Path(args.generate).write_text(dump(doc))
        return 0
    committed = json.loads(Path(args.check).read_text())
    fresh = json.loads(dump(doc))
    committed.get("generator", {}).pop("torch", None)
    fresh["generator"].pop("torch", None)
    errors = []
    compare("$", committed, fresh, errors)
    if errors:
        print(
            f"{args.check}: {len(errors)} differences from a fresh run:",
            file=sys.stderr,
        )
        for e in errors[:20]:
            print("  " + e, file=sys.stderr)
        return 1
    print(f"{args.check}: matches the models' own code (transformers {transformers.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
