"""A real MLA model through the fabric: transformers' own DeepseekV3 (see ``mla_model.py``)
prefills a prompt, its latent cache goes into node 1 of a 3-node cluster as canonical blocks,
a second process finds them by chunk key on node 3, fetches them there and decodes from them.

What is asserted, per preset whose model is DeepseekV3's architecture (DeepSeek-V3, Kimi K2):

- the cache rebuilt from the fetched blocks (``c_kv`` as stored, ``k_rope`` rotated by the
  model's own rotary embedding) is the model's own prefill cache, bit for bit, and decoding from
  it gives the model's own cached decode, bit for bit: tokens and every logit;
- both are the next-token logits of a full recompute (no cache) within LOGITS_ULPS bf16 ulps of
  the largest logit, with the same greedy tokens. The recompute is the same bf16 model over a
  longer sequence: its matmuls have other shapes, so its sums may round differently, by about
  an ulp per op; nothing of the cache is approximated (the first assertion is exact);
- a cache whose ``k_rope`` is the fabric's ``?position`` read (the fabric rotating, rounding
  once to bf16, where the model rounds its bf16 cos/sin and products) decodes to the same greedy
  tokens, its logits within the same tolerance;
- a chunk put canonically and read at ``?position=P`` gives, on every layer, the ``k_rope`` the
  model's own rotary embedding and apply function give at ``P`` (run in float32), within the
  bound of ``crates/store/tests/rope_vectors.rs`` (half a bf16 ulp for the one rounding, plus
  what the model's own float32 angle is off by at ``P``), and ``c_kv`` unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import mla_model  # noqa: E402
from mla_model import (  # noqa: E402
    PRESETS,
    blocks_from,
    build,
    decode,
    model_rotate,
    prefill,
    recompute,
    regions,
    reinterleave,
)

import kvfabric  # noqa: E402

#: Whole blocks in the prompt; one more token is fed by the decoding process.
BLOCKS = 2
#: Greedy decoding steps after the prompt.
STEPS = 4
#: Tolerance against a full recompute, in bf16 ulps (2^-7 relative) of the largest |logit|.
LOGITS_ULPS = 4
#: Bound on the decoding process (model build, fetches, two decodes).
CHILD_TIMEOUT_S = 600


def tokens(seed: int, n: int, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def ulp_bf16(x: np.ndarray) -> np.ndarray:
    x = np.maximum(np.abs(x), np.finfo(np.float32).tiny)
    return np.exp2(np.floor(np.log2(x)) - 7)


def ulp_f32(x: np.ndarray) -> np.ndarray:
    x = np.maximum(np.abs(x), np.finfo(np.float32).tiny)
    return np.exp2(np.floor(np.log2(x)) - 23)


def assert_logits_close(what: str, got: torch.Tensor, full: torch.Tensor) -> float:
    """``got`` within LOGITS_ULPS bf16 ulps of ``full``'s largest magnitude; returns the error."""
    got, full = got.float(), full.float()
    tol = LOGITS_ULPS * float(ulp_bf16(np.array(full.abs().max().item())))
    err = (got - full).abs().max().item()
    assert err <= tol, f"{what}: logits off a full recompute by {err:e} (tolerance {tol:e})"
    return err


def run_decoder(cluster, tmp_path: Path, model, preset: str, prompt: list[int]) -> dict:
    weights = tmp_path / "weights.pt"
    torch.save(model.state_dict(), weights)
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"preset": preset, "prompt": prompt, "weights": str(weights), "steps": STEPS})
    )
    out = tmp_path / "decoded.pt"
    run = subprocess.run(
        [
            sys.executable,
            mla_model.__file__,
            "decode",
            "--url",
            cluster.url(3),
            "--spec",
            str(spec),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    assert run.returncode == 0, f"the decoding process failed:\n{run.stderr}{run.stdout}"
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("preset", PRESETS)
def test_a_prefilled_latent_put_on_node1_decodes_on_node3_as_the_model_does(
    cluster, tmp_path, preset
):
    model = build(preset, seed=16)
    b = kvfabric.model(preset).block_tokens
    prompt = tokens(1, BLOCKS * b + 1, model.config.vocab_size)
    cache, k_pre = prefill(model, prompt[: BLOCKS * b])
    for i, layer in enumerate(cache.layers):
        # The cache's k_rope is the model's rotation of the rows the hook took: the hook saw
        # the model's own un-rotated k_rope.
        assert torch.equal(model_rotate(model, k_pre[i], 0), layer.values[0, 0]), i
    own = [(lay.keys.clone(), lay.values.clone()) for lay in cache.layers]

    payloads = blocks_from(cache, k_pre, preset)
    keys = kvfabric.chunk_keys(preset, prompt[: BLOCKS * b])
    c1 = kvfabric.Client(cluster.url(1))
    for key, payload in zip(keys, payloads, strict=True):
        put = c1.put(payload, preset, chunk_key=key)
        assert put.block == kvfabric.block_id(preset, payload, cluster.key()).hex()
        assert put.replicas == 2

    r = run_decoder(cluster, tmp_path, model, preset, prompt)
    assert r["blocks"] == [kvfabric.block_id(preset, p, cluster.key()).hex() for p in payloads]
    assert all(s in ("local", "n1", "n2") for s in r["sources"]), r["sources"]

    # The cache rebuilt in the other process is the model's own, bit for bit.
    assert len(r["cache"]) == len(own) == model.config.num_hidden_layers
    for i, ((k, v), (k0, v0)) in enumerate(zip(r["cache"], own, strict=True)):
        assert torch.equal(k, k0), f"layer {i}: c_kv"
        assert torch.equal(v, v0), f"layer {i}: k_rope"
    # Decoding from it is the model's own cached decode, bit for bit.
    fed, logits = decode(model, cache, prompt[-1], STEPS)
    assert r["model_tokens"] == fed
    assert torch.equal(r["model_logits"], logits)

    # And a full recompute's next-token logits, within the tolerance; the same greedy tokens.
    worst = {"model": 0.0, "fabric": 0.0}
    for s in range(STEPS):
        full = recompute(model, prompt[: BLOCKS * b] + fed[: s + 1])
        if s + 1 < STEPS:
            assert int(full.argmax()) == fed[s + 1], f"step {s}"
        for mode in worst:
            err = assert_logits_close(f"{mode} step {s}", r[f"{mode}_logits"][s], full)
            worst[mode] = max(worst[mode], err)
    # The fabric-rotated cache decodes to the same tokens; its k_rope is the model's within
    # their roundings: the model's bf16 path rounds cos, sin, both products and the sum (each
    # by at most u = 2^-8 relative), so it is within 2u·|pair| + half an ulp of the exact
    # rotation (Cauchy-Schwarz: |k1·cos| + |k2·sin| <= |pair|), the fabric within half an ulp.
    assert r["fabric_tokens"] == fed
    for i, (k_rot, (_, v0)) in enumerate(zip(r["fabric_k_rot"], own, strict=True)):
        f, h = k_rot[0, 0].double().numpy(), v0[0, 0].double().numpy()
        half = h.shape[-1] // 2
        pair = np.hypot(h, np.roll(h, half, axis=-1))  # de-interleaved: dim d pairs d ± 32
        bound = ulp_bf16(np.maximum(np.abs(f), np.abs(h))) + 2.0**-7 * 1.01 * pair
        assert (np.abs(f - h) <= bound).all(), f"layer {i}: fabric k_rope off the model's"
    print(f"{preset}: logits vs full recompute, worst |diff|: {worst}")


@pytest.mark.parametrize("preset", PRESETS)
def test_a_canonical_chunk_read_at_p_is_the_models_own_rotation_at_p(cluster, preset):
    model = build(preset, seed=17)
    m = kvfabric.model(preset)
    b = m.block_tokens
    cache, k_pre = prefill(model, tokens(2, b, model.config.vocab_size))
    [payload] = blocks_from(cache, k_pre, preset)
    put = kvfabric.Client(cluster.url(1)).put(payload, preset)
    c3 = kvfabric.Client(cluster.url(3))
    inv = model.model.rotary_emb.inv_freq.double().numpy()
    original = model.config.rope_parameters["original_max_position_embeddings"]
    top = model.config.max_position_embeddings - b
    positions = sorted({0, 1, b, 1000, original - b, original, 100_000, top})
    rounded = elements = 0
    for p in positions:
        got = c3.get(put.block, position=p)
        assert len(got) == m.block_bytes
        rows = np.arange(p, p + b, dtype=np.float64)[:, None]
        pair = np.arange(m.rope_dim) // 2
        # The fabric's f64 frequencies are the model's f32 ones within 2 f32 ulps
        # (crates/store/tests/rope_vectors.rs); the rest is the model's own f32 angle.
        drift = rows * 2 * ulp_f32(inv[pair]) + ulp_f32(rows * inv[pair]) / 2 + 2.0**-20
        for i in range(m.num_layers):
            ckv, k = regions(got, preset, i)
            ckv0, k0 = regions(payload, preset, i)
            assert torch.equal(ckv, ckv0), f"P={p} layer {i}: c_kv is not rotated"
            fabric = k.float().numpy().astype(np.float64)
            ref = reinterleave(model_rotate(model, k0.float(), p)).numpy().astype(np.float64)
            partner = ref[:, np.arange(m.rope_dim) ^ 1]
            bound = (
                ulp_bf16(np.maximum(np.abs(fabric), np.abs(ref))) / 2
                + np.hypot(ref, partner) * drift
            )
            err = np.abs(fabric - ref)
            worst = np.unravel_index(np.argmax(err / bound), err.shape)
            assert (err <= bound).all(), (
                f"P={p} layer {i} row {worst[0]} dim {worst[1]}: fabric {fabric[worst]} vs "
                f"model {ref[worst]} (bound {bound[worst]:e})"
            )
            as_bf16 = torch.from_numpy(ref.astype(np.float32)).bfloat16().float().numpy()
            rounded += int((as_bf16 == fabric).sum())
            elements += fabric.size
    print(f"{preset}: {rounded} of {elements} rotated elements are the model's value in bf16")
