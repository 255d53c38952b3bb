"""A tiny DeepSeek-V3-architecture model and its latent cache as kvfabric blocks.

Shared by ``test_mla_model.py`` and the second process it starts (``python mla_model.py
decode ...``), which fetches the blocks from another node and decodes from them.

The model is transformers' own ``DeepseekV3ForCausalLM`` (5.20.x) built from the published
config values of ``tools/rope_models.json`` (every RoPE key kept: YaRN factor, original length,
beta, mscale) with small random weights, nothing downloaded. Its latent geometry is the
preset's, unshrunk: 61 layers, ``kv_lora_rank`` 512, ``qk_rope_head_dim`` 64, bf16, so its
cache is exactly a ``deepseek-v3`` (or ``kimi-k2``) block. Everything else (hidden size, heads,
experts, vocabulary) is shrunk; the forward pass over a few blocks takes well under a second
on one CPU thread.

Where the blocks come from, exactly:

- transformers 5.20's ``DeepseekV3Attention`` caches the latent itself: ``keys`` of layer ``i``
  is ``kv_a_layernorm``'s output (``c_kv``, what vLLM's MLA cache holds), ``values`` is
  ``k_rope`` after ``apply_rotary_pos_emb_interleave``, which rotates the checkpoint's
  adjacent pairs ``(2j, 2j+1)`` and returns them de-interleaved (all even dims, then all odd
  ones);
- a canonical block holds ``k_rope`` before RoPE in the checkpoint's order (as vLLM's cache
  and the preset keep it): taken from ``kv_a_proj_with_mqa``'s output (its last 64 dims) by a
  forward hook, so no arithmetic touches it.

Rebuilding the cache from blocks is the model's own code again: its ``rotary_emb`` and
``apply_rotary_pos_emb_interleave`` on the canonical rows (``rotate="model"``), or the
fabric's rotation (``?position=`` reads, re-ordered by index into the model's de-interleaved
order: ``rotate="fabric"``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.cache_utils import DynamicCache
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds3

import kvfabric

REPO = Path(__file__).resolve().parents[2]
ROPE_MODELS = REPO / "tools" / "rope_models.json"
#: The presets whose models are DeepseekV3's architecture.
PRESETS = ("deepseek-v3", "kimi-k2")
#: Everything but the latent geometry and RoPE, shrunk; every layer dense (no MoE routing, whose
#: ties would make a bf16 model's output depend on summation order).
SHRINK = {
    "hidden_size": 128,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "q_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "vocab_size": 512,
    "moe_intermediate_size": 32,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
}


def config(preset: str) -> transformers.DeepseekV3Config:
    """The published config of ``preset`` (its RoPE keys verbatim), shrunk but for the latent."""
    entry = next(e for e in json.loads(ROPE_MODELS.read_text())["mla"] if e["preset"] == preset)
    assert entry["class"] == "deepseek_v3", entry
    geometry = kvfabric.model(preset)
    cfg = dict(entry["config"])
    cfg.update(SHRINK)
    cfg["num_hidden_layers"] = geometry.num_layers
    cfg["first_k_dense_replace"] = geometry.num_layers
    assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]) == (
        geometry.kv_lora_rank,
        geometry.rope_dim,
    ), "the model's latent is the preset's"
    c = transformers.DeepseekV3Config(**cfg)
    assert c.rope_interleave, "DeepSeek-V3 checkpoints ship interleaved RoPE weights"
    return c


def build(preset: str, seed: int | None = None, weights: Path | None = None):
    """The model in bf16 (random weights from ``seed``, or those saved at ``weights``)."""
    torch.set_num_threads(1)  # the same reduction order in both processes
    if seed is not None:
        torch.manual_seed(seed)
    # As from_pretrained builds it: bf16 weights, the rotary embedding's frequencies float32
    # (`model.to(torch.bfloat16)` would round those to bf16 too).
    model = transformers.AutoModelForCausalLM.from_config(config(preset), dtype=torch.bfloat16)
    assert isinstance(model, transformers.DeepseekV3ForCausalLM)
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    model.eval()
    if weights is not None:
        model.load_state_dict(torch.load(weights, weights_only=True))
    return model


def prefill(model, tokens: list[int]):
    """The model's own prefill: its cache, and each layer's ``k_rope`` before RoPE
    (``[tokens, 64]``, checkpoint order) from ``kv_a_proj_with_mqa``."""
    rank = model.config.kv_lora_rank
    pre: dict[int, torch.Tensor] = {}
    hooks = [
        layer.self_attn.kv_a_proj_with_mqa.register_forward_hook(
            lambda _m, _i, out, i=i: pre.__setitem__(i, out[0, :, rank:].clone())
        )
        for i, layer in enumerate(model.model.layers)
    ]
    try:
        with torch.no_grad():
            out = model(torch.tensor([tokens]), use_cache=True)
    finally:
        for h in hooks:
            h.remove()
    return out.past_key_values, [pre[i] for i in range(len(pre))]


def bf16_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.int16).numpy().tobytes()


def from_bf16(b, rows: int, dims: int) -> torch.Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.bfloat16).reshape(rows, dims)


def blocks_from(cache, k_pre: list[torch.Tensor], preset: str) -> list[bytes]:
    """The canonical payloads of every whole block of the prefilled tokens, in the preset's
    layout (per layer: ``c_kv`` rows, then un-rotated ``k_rope`` rows)."""
    m = kvfabric.model(preset)
    b = m.block_tokens
    n = cache.layers[0].keys.shape[2] // b
    out = []
    for j in range(n):
        payload = bytearray(m.block_bytes)
        for i, layer in enumerate(m.layers):
            ckv, kr = layer.region("c_kv"), layer.region("k_rope")
            rows = slice(j * b, (j + 1) * b)
            payload[ckv.offset : ckv.offset + ckv.nbytes] = bf16_bytes(
                cache.layers[i].keys[0, 0, rows]
            )
            payload[kr.offset : kr.offset + kr.nbytes] = bf16_bytes(k_pre[i][rows])
        out.append(bytes(payload))
    return out


def regions(payload, preset: str, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``c_kv`` and ``k_rope`` rows of one layer of a payload."""
    m = kvfabric.model(preset)
    ckv, kr = m.layers[layer].region("c_kv"), m.layers[layer].region("k_rope")
    return (
        from_bf16(payload[ckv.offset : ckv.offset + ckv.nbytes], ckv.rows, ckv.dims),
        from_bf16(payload[kr.offset : kr.offset + kr.nbytes], kr.rows, kr.dims),
    )


def deinterleave(k: torch.Tensor) -> torch.Tensor:
    """Checkpoint order ``(x0, x1), (x2, x3), ...`` to the model's ``[x0, x2, ..., x1, x3, ...]``
    (by index, no arithmetic)."""
    return torch.cat((k[..., 0::2], k[..., 1::2]), dim=-1)


def reinterleave(k: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`deinterleave`."""
    half = k.shape[-1] // 2
    return torch.stack((k[..., :half], k[..., half:]), dim=-1).flatten(-2)


def model_rotate(model, k: torch.Tensor, first: int) -> torch.Tensor:
    """``k`` (``[rows, 64]``, checkpoint order, any float dtype) rotated by the model's own
    rotary embedding and apply function to positions ``first ..``, in the model's
    de-interleaved order and ``k``'s dtype."""
    k = k[None, None]
    positions = torch.arange(first, first + k.shape[2])[None]
    with torch.no_grad():
        cos, sin = model.model.rotary_emb(k, positions)
        _, out = ds3.apply_rotary_pos_emb_interleave(k, k, cos, sin)
    return out[0, 0]


def cache_from(model, preset: str, payloads: list, rotated: list | None = None) -> DynamicCache:
    """A cache for ``model`` from blocks: the canonical payloads, ``k_rope`` rotated by the
    model's own code (``rotated`` None); or the fabric's ``?position=`` reads of the same blocks
    as they are (``rotated[j]`` read at ``j * block_tokens``), ``k_rope`` only re-ordered."""
    cache = DynamicCache(config=model.config)
    for i in range(model.config.num_hidden_layers):
        parts = [regions(p, preset, i) for p in (payloads if rotated is None else rotated)]
        ckv = torch.cat([c for c, _ in parts])
        k = torch.cat([k for _, k in parts])
        k_rot = model_rotate(model, k, 0) if rotated is None else deinterleave(k)
        cache.update(ckv[None, None], k_rot[None, None], i)
    return cache


def decode(model, cache, first: int, steps: int) -> tuple[list[int], torch.Tensor]:
    """Greedy decoding from ``cache``: feeds ``first``, then each step's argmax; returns the
    tokens fed and each step's next-token logits (``[steps, vocab]``, bf16)."""
    fed, logits = [first], []
    with torch.no_grad():
        for s in range(steps):
            out = model(torch.tensor([[fed[-1]]]), past_key_values=cache, use_cache=True)
            logits.append(out.logits[0, -1])
            if s + 1 < steps:
                fed.append(int(out.logits[0, -1].argmax()))
    return fed, torch.stack(logits)


def recompute(model, tokens: list[int]) -> torch.Tensor:
    """Next-token logits after ``tokens``, by a full forward pass without a cache."""
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1]


def _decode_main(a: argparse.Namespace) -> None:
    """The second process: look the prompt's chunk keys up on a node, fetch its blocks there
    (canonical, and at their positions), rebuild the cache both ways, decode."""
    spec = json.loads(Path(a.spec).read_text())
    preset, prompt = spec["preset"], spec["prompt"]
    model = build(preset, weights=Path(spec["weights"]))
    m = kvfabric.model(preset)
    b = m.block_tokens
    n = len(prompt) // b
    keys = kvfabric.chunk_keys(preset, prompt[: n * b])
    client = kvfabric.Client(a.url)
    found = client.lookup(keys)
    canonical, rotated, sources = [], [], []
    for j, hit in enumerate(found):
        if hit.block is None:
            raise SystemExit(f"chunk {j}: no block on {a.url}")
        buf = np.empty(m.block_bytes, np.uint8)
        info = client.get_into(hit.block, buf)
        assert info.verified, "hashed against its id"
        canonical.append(buf.tobytes())
        sources.append(info.source)
        rotated.append(client.get(hit.block, position=j * b))
    out = {"sources": sources, "blocks": [h.block for h in found]}
    for mode, rot in (("model", None), ("fabric", rotated)):
        cache = cache_from(model, preset, canonical, rot)
        if mode == "model":
            out["cache"] = [(lay.keys.clone(), lay.values.clone()) for lay in cache.layers]
        else:
            out["fabric_k_rot"] = [lay.values.clone() for lay in cache.layers]
        out[f"{mode}_tokens"], out[f"{mode}_logits"] = decode(
            model, cache, prompt[n * b], spec["steps"]
        )
    torch.save(out, a.out)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("decode", help="fetch a prompt's blocks from a node and decode")
    d.add_argument("--url", required=True, help="the node to read from")
    d.add_argument("--spec", required=True, help="JSON: preset, prompt, weights, steps")
    d.add_argument("--out", required=True, help="where to torch.save the results")
    a = p.parse_args(argv)
    _decode_main(a)


if __name__ == "__main__":
    main(sys.argv[1:])
