"""vLLM's block-hash chain mapped to kvfabric chunk keys (kvfabric/vllm/keys.py), checked
against vLLM's own block hasher and extra-key code."""

from __future__ import annotations

import itertools

import pytest
from vllm.lora.request import LoRARequest
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange

import kvfabric
from kvfabric.vllm.harness import MODEL, Engine
from kvfabric.vllm.keys import encode_extra_keys, request_chunk_keys

B = kvfabric.model(MODEL).block_tokens
PAGE = 16


@pytest.fixture(scope="module")
def engine():
    e = Engine("http://127.0.0.1:9", PAGE, num_pages=4)
    yield e
    e.close()


def mm(identifier: str, offset: int, length: int) -> MultiModalFeatureSpec:
    return MultiModalFeatureSpec(None, "image", identifier, PlaceholderRange(offset, length))


def variants():
    base = list(range(500, 500 + 3 * B + 5))
    other_tail = [*base[: B + 10], 7, *base[B + 11 :]]
    return {
        "base": (base, {}),
        "base-again": (list(base), {}),
        "tokens differ in chunk 1": (other_tail, {}),
        "salt a": (base, {"cache_salt": "a"}),
        "salt a again": (base, {"cache_salt": "a"}),
        "salt b": (base, {"cache_salt": "b"}),
        "lora 1": (base, {"lora_request": LoRARequest("adapter-1", 1, "/p/1")}),
        "lora 1, other id": (base, {"lora_request": LoRARequest("adapter-1", 9, "/p/1")}),
        "lora 1, other path": (base, {"lora_request": LoRARequest("adapter-1", 1, "/p/2")}),
        "image x in chunk 1": (base, {"mm_features": [mm("x", B + 3, 20)]}),
        "image y in chunk 1": (base, {"mm_features": [mm("y", B + 3, 20)]}),
        "image x shifted": (base, {"mm_features": [mm("x", B + 4, 20)]}),
    }


def test_keys_are_equal_exactly_when_vllms_block_hashes_are(engine):
    reqs = {
        name: engine.request(f"k{i}", toks, **kw)
        for i, (name, (toks, kw)) in enumerate(variants().items())
    }
    keys = {n: request_chunk_keys(r, MODEL, B, 3, "default") for n, r in reqs.items()}
    checked = 0
    for (a, ra), (b, rb) in itertools.combinations(reqs.items(), 2):
        for c in range(3):
            last_page = (c + 1) * B // PAGE - 1
            same_vllm = ra.block_hashes[last_page] == rb.block_hashes[last_page]
            assert (keys[a][c] == keys[b][c]) == same_vllm, (a, b, c)
            checked += 1
    assert checked == 3 * len(reqs) * (len(reqs) - 1) // 2
    assert keys["base"] == keys["base-again"]
    assert keys["tokens differ in chunk 1"][0] == keys["base"][0]
    assert keys["tokens differ in chunk 1"][1:] != keys["base"][1:]
    assert keys["image x in chunk 1"][0] == keys["base"][0] != keys["image x in chunk 1"][1]


def test_a_request_without_extra_keys_gets_the_keys_routers_compute(engine):
    toks = list(range(9000, 9000 + 2 * B + 3))
    r = engine.request("plain", toks)
    assert request_chunk_keys(r, MODEL, B, 2, "team-a") == kvfabric.chunk_keys(
        MODEL, toks, "prefix", "team-a"
    )


def test_the_extra_keys_encoding_is_canonical():
    assert encode_extra_keys(None) is None and encode_extra_keys(()) is None
    a = encode_extra_keys((("lora", "x", "/p"), ("cache_salt", "s")))
    assert a == encode_extra_keys([("lora", "x", "/p"), ("cache_salt", "s")])
    assert a != encode_extra_keys((("lora", "x", "/p"),))
    assert encode_extra_keys(("ab", "c")) != encode_extra_keys(("a", "bc"))
    assert encode_extra_keys((1,)) != encode_extra_keys(("1",))
    with pytest.raises(TypeError):
        encode_extra_keys((object(),))
