"""Presets, fingerprints, chunk keys and block ids of the native module against the node's
own answers and the store's test vectors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import kvfabric

from conftest import REPO, kvfabric_bin

VECTORS = REPO / "crates" / "store" / "tests" / "data" / "chunk_keys.json"


def test_chunk_keys_match_the_stores_vectors_in_both_modes():
    data = json.loads(VECTORS.read_text())
    modes = set()
    for v in data["vectors"]:
        assert kvfabric.fingerprint(v["model"]).hex() == v["fingerprint"]
        got = kvfabric.chunk_keys(v["model"], v["tokens"], v["mode"], v["namespace"])
        assert [k.hex() for k in got] == v["keys"], v["label"]
        modes.add(v["mode"])
    assert modes == {"prefix", "independent"}


def test_every_preset_matches_kvfabric_models():
    out = subprocess.run(
        [str(kvfabric_bin()), "models", "--json"], capture_output=True, text=True, check=True
    )
    node = {m["name"]: m for m in json.loads(out.stdout)["models"]}
    mine = {m.name: m for m in kvfabric.models()}
    assert set(mine) == set(node)
    for name, m in mine.items():
        n = node[name]
        assert (m.kind, m.num_layers, m.block_tokens, m.block_bytes) == (
            n["kind"],
            n["layers"],
            n["block_tokens"],
            n["block_bytes"],
        ), name
        assert sum(lay.nbytes for lay in m.layers) == m.block_bytes
        assert len(m.fingerprint) == 16
        dtypes = {
            ("kv" if r.name in ("key", "value") else r.name): r.dtype
            for lay in m.layers
            for r in lay.regions
        }
        assert dtypes == n["dtypes"], name


def test_the_mla_layout_is_c_kv_rows_then_k_rope_rows_per_layer():
    m = kvfabric.model("deepseek-v3")
    assert m.block_bytes == 61 * 64 * (512 + 64) * 2 == 4_497_408
    offset = 0
    for lay in m.layers:
        ckv, krope = lay.regions
        assert (ckv.name, ckv.dims, ckv.rows, ckv.dtype) == ("c_kv", 512, 64, "bf16")
        assert (krope.name, krope.dims, krope.rows) == ("k_rope", 64, 64)
        assert (ckv.offset, krope.offset) == (offset, offset + 64 * 512 * 2)
        offset += lay.nbytes
    assert offset == m.block_bytes


def test_block_ids_and_fingerprints_of_every_storable_preset_match_the_nodes(cluster):
    c = kvfabric.Client(cluster.url(2))
    for m in kvfabric.models():
        if not m.storable or m.block_bytes > 8 << 20:
            continue
        payload = np.random.default_rng(len(m.name)).integers(0, 256, m.block_bytes, np.uint8)
        put = c.put(payload, m.name)
        assert put.block == kvfabric.block_id(m.name, payload, c.namespace_keys()[0]).hex(), m.name
        c.delete(put.block)


def test_the_python_reference_agrees_for_every_preset():
    """tools/chunk_keys.py (pure Python) against the native keys, every preset, both modes."""
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "chunk_keys.py"), "--check-native"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    assert f"{2 * len(kvfabric.models())} of" in out.stdout


def test_bad_arguments_are_typed_errors():
    with pytest.raises(KeyError):
        kvfabric.model("nope")
    with pytest.raises(ValueError):
        kvfabric.chunk_keys("deepseek-v3", [1, 2], mode="sideways")
    with pytest.raises(ValueError):
        kvfabric.block_id("deepseek-v3", b"short", bytes(32))
    payload = bytes(kvfabric.model("deepseek-v3").block_bytes)
    with pytest.raises(ValueError, match="32-byte namespace key"):
        kvfabric.block_id("deepseek-v3", payload, b"short key")
