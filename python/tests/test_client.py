"""kvfabric.Client against real nodes (and a scripted server for 503 bursts and stalls)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import kvfabric
from kvfabric import EngineBlock

from conftest import visible

V3 = kvfabric.model("deepseek-v3")


def block(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, V3.block_bytes, dtype=np.uint8)


def test_put_then_get_from_another_node_into_each_kind_of_buffer(cluster):
    torch = pytest.importorskip("torch")
    data = block(1)
    key = kvfabric.chunk_keys("deepseek-v3", range(64), namespace="default")[0]
    put = kvfabric.Client(cluster.url(1)).put(data, "deepseek-v3", chunk_key=key)
    assert put.block == kvfabric.block_id("deepseek-v3", data, cluster.key()).hex()
    assert put.replicas == 2 and put.dedup in ("new", "shared")
    c3 = kvfabric.Client(cluster.url(3))
    [hit] = visible(cluster.url(3), [key], owners=2)
    assert hit.block == put.block

    ba = bytearray(V3.block_bytes)
    arr = np.zeros(V3.block_bytes, dtype=np.uint8)
    ten = torch.zeros(V3.block_bytes // 2, dtype=torch.bfloat16)
    ptr = ten.data_ptr()
    for out in (ba, arr, ten):
        info = c3.get_into(put.block, out)
        assert info.nbytes == V3.block_bytes and info.verified and info.model == "deepseek-v3"
    assert bytes(ba) == data.tobytes()
    assert np.array_equal(arr, data)
    assert ten.data_ptr() == ptr, "read into the tensor's own storage"
    assert ten.view(torch.uint8).numpy().tobytes() == data.tobytes()
    assert c3.get(put.block) == data.tobytes()


def test_head_delete_and_typed_refusals(cluster):
    c = kvfabric.Client(cluster.url(2))
    data = block(2)
    put = c.put(data, "deepseek-v3")
    assert c.head(put.block).nbytes == V3.block_bytes
    with pytest.raises(kvfabric.NotFound) as e:
        c.get("ab" * 32)
    assert (e.value.status, e.value.code) == (404, "not_found")
    with pytest.raises(kvfabric.BadRequest) as e:
        c.put(data[:-1], "deepseek-v3")
    assert e.value.code == "payload_length"
    with pytest.raises(kvfabric.BadRequest) as e:
        c.put(data, "no-such-model", tokens=64)
    assert e.value.code == "unknown_model"
    with pytest.raises(kvfabric.BadRequest) as e:
        c.put(data, "deepseek-v3", tokens=63)
    assert e.value.code == "token_count"
    with pytest.raises(kvfabric.KvFabricError):
        c.get_into(put.block, bytearray(10))  # a buffer too small is refused, not overrun
    c.delete(put.block)
    # DELETE drops this node's copy only: HEAD then answers as GET would, from a replica
    # (put said replicas=2) or not at all, never from a copy of this node's own.
    after = c.head(put.block)
    assert after is None or after.source != "local"


def test_a_put_with_the_engine_headers_is_accepted(cluster):
    c = kvfabric.Client(cluster.url(1))
    engine = EngineBlock(
        "vllm/0.33.0",
        [bytes([i]) * 32 for i in range(4)],
        b"\x07" * 32,
        16,
        list(range(64)),
        lora_id=3,
    )
    put = c.put(block(3), "deepseek-v3", engine=engine)
    assert put.block == kvfabric.block_id("deepseek-v3", block(3), cluster.key()).hex()
    names = dict(engine.headers())
    assert names["kvfabric-engine-block-hashes"].count(",") == 3
    assert names["kvfabric-engine-token-ids"].split(",")[:3] == ["0", "1", "2"]


def test_route_and_events(cluster):
    c = kvfabric.Client(cluster.url(1))
    tokens = list(range(1000, 1128))
    keys = kvfabric.chunk_keys("deepseek-v3", tokens)
    ind = kvfabric.chunk_keys("deepseek-v3", tokens, mode="independent")
    put = c.put(block(4), "deepseek-v3", chunk_key=keys[0], chunk_key_independent=ind[0])
    visible(cluster.url(1), keys[:1])
    route = c.route(keys, chunks=ind, model="deepseek-v3")
    assert route["model"] == "deepseek-v3" and route["chunks"] == 2
    assert {n["node"] for n in route["nodes"]} == {"n1", "n2", "n3"}
    assert max(n["hits"] for n in route["nodes"]) == 1
    stored = None
    for e in c.events(since=0, read_timeout_s=10):
        if e.event == "stored" and put.block in e.data["blocks"]:
            stored = e
            break
    assert stored is not None and stored.data["node"] == "n1" and stored.data["tier"]
    assert stored.data["chunk_key"] in (keys[0].hex(), ind[0].hex())
    with pytest.raises(kvfabric.ClientTimeout):
        for i, _ in enumerate(c.events(read_timeout_s=0.5)):  # the bounded read gives up
            assert i < 10_000


def test_a_read_that_does_not_hash_to_its_id_raises(cluster):
    c = kvfabric.Client(cluster.url(1))
    put = c.put(block(5), "deepseek-v3")
    wrong = kvfabric.Client(cluster.url(1), namespace="default")
    wrong.verify_namespace = "someone-else"  # ids keyed by another namespace cannot match
    with pytest.raises(kvfabric.VerificationError):
        wrong.get(put.block)
    stale = kvfabric.Client(cluster.url(1))
    stale._keys = [kvfabric.namespace_key("default")]  # keys from before a rotation
    assert len(stale.get(put.block)) == V3.block_bytes, "asked again, then verified"
    assert stale.namespace_keys() == [cluster.key()]


def test_namespace_keys_come_from_the_node_and_not_from_the_name(cluster):
    [ns] = kvfabric.Client(cluster.url(2)).namespaces()
    assert ns["name"] == "default" and ns["access"] == "write" and not ns["shared"]
    assert [bytes.fromhex(k) for k in ns["keys"]] == [cluster.key()], "one secret, every node"
    assert cluster.key() != kvfabric.namespace_key("default")


def _err(code: str, status_text: str = "") -> bytes:
    return json.dumps({"error": {"code": code, "message": status_text}}).encode()


def test_503_is_retried_with_backoff_then_gives_up(scripted):
    ok = json.dumps({"block": "ab" * 32, "dedup": "new", "bytes": 64, "replicas": 1}).encode()
    scripted.script += [(503, _err("overloaded"), 0), (503, _err("overloaded"), 0), (201, ok, 0)]
    c = kvfabric.Client(scripted.url, retries=3, backoff_s=0.01)
    assert c.put(b"x" * 10, "deepseek-v3").block == "ab" * 32
    assert c.retried == 2 and len(scripted.seen) == 3
    scripted.script += [(503, _err("not_ready"), 0)] * 3
    with pytest.raises(kvfabric.Unavailable) as e:
        kvfabric.Client(scripted.url, retries=2, backoff_s=0.01).lookup(["ab" * 32])
    assert e.value.code == "not_ready" and e.value.status == 503
    assert len(scripted.seen) == 6


def test_calls_are_bounded_in_time(scripted):
    scripted.script += [(200, b"{}", 3.0)]
    c = kvfabric.Client(scripted.url, timeout_s=0.5, retries=0)
    t = time.monotonic()
    with pytest.raises(kvfabric.ClientTimeout):
        c.cluster()
    assert time.monotonic() - t < 2.5


def test_a_refused_connection_is_a_transport_error():
    c = kvfabric.Client("http://127.0.0.1:9", retries=1, backoff_s=0.01)
    with pytest.raises(kvfabric.TransportError):
        c.cluster()
    assert c.retried == 1
