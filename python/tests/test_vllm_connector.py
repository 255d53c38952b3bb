"""The connector inside vLLM's own machinery: built by vLLM's KVConnectorFactory from its
module path, driven by vLLM's Request / block hasher / KVCacheBlocks / SchedulerOutput, with
CPU caches from vLLM's allocator in vLLM's MLA layout, against a real 3-node cluster."""

from __future__ import annotations

import os

import pytest
import torch
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
from vllm.v1.kv_cache_layout import KVCacheLayout

import kvfabric
from kvfabric.vllm import KvFabricConnector
from kvfabric.vllm.harness import V3, Engine, vllm_config

from conftest import Cluster, visible

B = V3.block_tokens


def tokens(seed: int, n: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 129_000, (n,), generator=g).tolist()


def test_vllm_factory_builds_the_connector_from_its_module_path(cluster):
    cfg = vllm_config(cluster.url(1), 16)
    cls = KVConnectorFactory.get_connector_class(cfg.kv_transfer_config)
    assert cls is KvFabricConnector and issubclass(cls, KVConnectorBase_V1)
    e = Engine(cluster.url(1), num_pages=4)
    assert isinstance(e.scheduler, KvFabricConnector) and e.scheduler.scheduler is not None
    assert isinstance(e.workers[0], KvFabricConnector) and e.workers[0].worker is not None
    e.close()


@pytest.mark.parametrize(
    "page_tokens, save_tp, load_tp, layout",
    [(16, 1, 2, KVCacheLayout.LBHNC), (64, 2, 1, KVCacheLayout.BLHNC)],
)
def test_saved_through_node1_loads_through_node3_bit_for_bit(
    cluster, page_tokens, save_tp, load_tp, layout
):
    seed = page_tokens * 10 + save_tp
    prompt = tokens(seed, 3 * B + 9)  # three whole blocks and a partial one
    producer = Engine(cluster.url(1), page_tokens, save_tp, layout=layout)
    consumer = Engine(cluster.url(3), page_tokens, load_tp, layout=layout)
    try:
        r = producer.request("p", prompt)
        assert producer.scheduler.get_num_new_matched_tokens(r, 0) == (0, False)
        blocks = producer.allocate(r)
        producer.scheduler.update_state_after_alloc(r, blocks, 0)
        producer.write_request_kv(r, blocks, seed)
        producer.step(new=[(r, blocks, r.num_tokens)])  # the prefill: chunks 0..2 complete
        saves = producer.workers[0].worker.stats
        assert producer.scheduler.request_finished(r, blocks.get_block_ids()[0]) == (True, None)
        producer.wait("finished_sending", "p")
        assert saves["saved"] == 3 and saves["save_failed"] == 0
        for w in producer.workers[1:]:
            assert w.worker.stats["saved"] == 0, "one put per TP group"

        q = consumer.request("q", prompt)
        keys = consumer.scheduler.scheduler.keys(q, 3)
        found = visible(cluster.url(3), keys)
        n, is_async = consumer.scheduler.get_num_new_matched_tokens(q, 0)
        assert n == 3 * B
        assert is_async == any("n3" not in f.owners for f in found)
        assert consumer.scheduler.get_num_new_matched_tokens(q, 0) == (n, is_async), (
            "side-effect free"
        )
        qblocks = consumer.allocate(q)
        consumer.scheduler.update_state_after_alloc(q, qblocks, n)
        consumer.step(new=[(q, qblocks, 0 if is_async else q.num_tokens - n)])
        errors = {e for _, errs in consumer.outputs for e in errs}
        if is_async:
            errors |= consumer.wait("finished_recving", "q")
        assert errors == set()
        want = producer.token_rows(0, blocks, 0, 3 * B)
        for rank in range(load_tp):
            assert torch.equal(consumer.token_rows(rank, qblocks, 0, 3 * B), want)
            tail = consumer.token_rows(rank, qblocks, 3 * B, q.num_tokens)
            assert bool((tail == Engine.SENTINEL).all()), "nothing past the hit is written"
    finally:
        producer.close()
        consumer.close()


def test_a_chunked_prefill_saves_each_chunk_once_in_the_step_that_completes_it(
    cluster, monkeypatch
):
    prompt = tokens(123, 3 * B + 3)
    e = Engine(cluster.url(2), 16)
    sent = []
    client = e.workers[0].worker.client
    real_put = client.put

    def recording_put(payload, model, **kw):
        sent.append(kw)
        return real_put(payload, model, **kw)

    monkeypatch.setattr(client, "put", recording_put)
    try:
        r = e.request("c", prompt)
        blocks = e.allocate(r)
        e.scheduler.update_state_after_alloc(r, blocks, 0)
        e.write_request_kv(r, blocks, 123)
        stats = e.workers[0].worker.stats
        e.step(new=[(r, blocks, B + 10)])  # chunk 0 complete
        e.step(cached=[(r, B + 10, 40)])  # 50 + 64 tokens: none
        e.step(cached=[(r, B + 50, 2 * B)])  # chunks 1 and 2
        assert e.scheduler.request_finished(r, blocks.get_block_ids()[0]) == (True, None)
        e.wait("finished_sending", "c")
        assert (stats["saved"], stats["save_failed"]) == (3, 0)
        # Each put carries the engine's view of its block (docs/API.md, engine metadata).
        by_key = {kw["chunk_key"]: kw["engine"] for kw in sent}
        keys0 = e.scheduler.scheduler.keys(r, 3)
        for c in range(3):
            eng = by_key[keys0[c]]
            assert list(eng.block_hashes) == r.block_hashes[4 * c : 4 * c + 4]
            assert eng.parent_hash == (r.block_hashes[4 * c - 1] if c else None)
            assert list(eng.token_ids) == prompt[c * B : (c + 1) * B]
            assert eng.page_tokens == 16 and eng.engine.startswith("vllm/")
        keys = e.scheduler.scheduler.keys(e.request("again", prompt), 3)
        found = visible(cluster.url(1), keys)
        key = cluster.key()
        ids = [
            kvfabric.block_id("deepseek-v3", _block_of(e, blocks, c), key).hex() for c in range(3)
        ]
        assert [f.block for f in found] == ids
    finally:
        e.close()


def _block_of(e: Engine, blocks, chunk: int):
    """The payload the layout maps chunk ``chunk`` of the pages to (what was put)."""
    buf = e.workers[0].worker.pages.new_block()
    e.workers[0].worker.pages.gather(buf, blocks.get_block_ids()[0], chunk)
    return buf.numpy()


def _flip_every_mib(disk: os.PathLike) -> int:
    flipped = 0
    for root, _, files in os.walk(disk):
        for f in files:
            path = os.path.join(root, f)
            size = os.path.getsize(path)
            with open(path, "r+b") as fh:
                for at in range(1 << 20, size, 1 << 20):
                    fh.seek(at)
                    b = fh.read(1)
                    fh.seek(at)
                    fh.write(bytes([b[0] ^ 0xFF]))
                    flipped += 1
    return flipped


def test_a_flipped_byte_on_the_holders_disk_is_a_load_error_and_nothing_is_loaded(
    tmp_path,
):
    c = Cluster(tmp_path, 3, "--replication", "1", "--host-bytes", "10 MiB")
    prompt = tokens(77, 4 * B + 1)
    producer = Engine(c.url(1), 16, io_threads=1)  # one put at a time: the host tier is small
    consumer = Engine(c.url(3), 16)
    try:
        r = producer.request("p", prompt)
        blocks = producer.allocate(r)
        producer.scheduler.update_state_after_alloc(r, blocks, 0)
        producer.write_request_kv(r, blocks, 77)
        producer.step(new=[(r, blocks, r.num_tokens)])
        producer.scheduler.request_finished(r, blocks.get_block_ids()[0])
        producer.wait("finished_sending", "p")
        n1 = kvfabric.Client(c.url(1))
        keys = producer.scheduler.scheduler.keys(r, 4)
        held = [f.block for f in visible(c.url(1), keys)]
        tiers = [n1.head(b).tier for b in held]
        assert tiers.count("disk") >= 2, tiers  # a host tier of one block: the rest demoted
        assert _flip_every_mib(c.disk_dir(1)) > 0

        q = consumer.request("q", prompt)
        n, is_async = consumer.scheduler.get_num_new_matched_tokens(q, 0)
        assert (n, is_async) == (4 * B, True), "held by n1 only: a remote, asynchronous load"
        qblocks = consumer.allocate(q)
        consumer.scheduler.update_state_after_alloc(q, qblocks, n)
        consumer.step(new=[(q, qblocks, 0)])
        errors = consumer.wait("finished_recving", "q")
        first_bad = tiers.index("disk")
        ids = qblocks.get_block_ids()[0]
        assert errors == set(ids[first_bad * B // 16 : 4 * B // 16])
        rows = consumer.token_rows(0, qblocks, first_bad * B, 4 * B)
        assert bool((rows == Engine.SENTINEL).all()), "no byte of a failed block is loaded"
        if first_bad:
            want = producer.token_rows(0, blocks, 0, first_bad * B)
            assert torch.equal(consumer.token_rows(0, qblocks, 0, first_bad * B), want)
        assert consumer.workers[0].worker.stats["load_failed"] == 4 - first_bad
    finally:
        producer.close()
        consumer.close()
        c.down()


def test_bytes_that_do_not_hash_to_the_block_are_not_loaded(cluster, monkeypatch):
    prompt = tokens(99, 2 * B + 1)
    producer = Engine(cluster.url(2), 16)
    consumer = Engine(cluster.url(2), 16)
    try:
        r = producer.request("p", prompt)
        blocks = producer.allocate(r)
        producer.scheduler.update_state_after_alloc(r, blocks, 0)
        producer.write_request_kv(r, blocks, 99)
        producer.step(new=[(r, blocks, r.num_tokens)])
        producer.scheduler.request_finished(r, blocks.get_block_ids()[0])
        producer.wait("finished_sending", "p")

        worker = consumer.workers[0].worker
        real = worker.client.get_into

        def flip_second_block(block, out, **kw):
            info = real(block, out, **kw)
            if block == second:
                out[100] ^= 1  # what a corrupting transfer or a bad node would hand over
            return info

        q = consumer.request("q", prompt)
        second = visible(cluster.url(2), consumer.scheduler.scheduler.keys(q, 2))[1].block
        monkeypatch.setattr(worker.client, "get_into", flip_second_block)
        n, is_async = consumer.scheduler.get_num_new_matched_tokens(q, 0)
        assert (n, is_async) == (2 * B, False), "held by the bound node: a synchronous load"
        qblocks = consumer.allocate(q)
        consumer.scheduler.update_state_after_alloc(q, qblocks, n)
        consumer.step(new=[(q, qblocks, q.num_tokens - n)])
        [(_, errors)] = consumer.outputs
        ids = qblocks.get_block_ids()[0]
        assert errors == set(ids[B // 16 : 2 * B // 16])
        assert torch.equal(
            consumer.token_rows(0, qblocks, 0, B), producer.token_rows(0, blocks, 0, B)
        )
        assert bool((consumer.token_rows(0, qblocks, B, 2 * B) == Engine.SENTINEL).all())
    finally:
        producer.close()
        consumer.close()


def test_an_unreachable_node_is_a_miss_not_an_error():
    e = Engine("http://127.0.0.1:9", 16, num_pages=8, retries=0)
    try:
        r = e.request("x", tokens(5, 2 * B + 1))
        assert e.scheduler.get_num_new_matched_tokens(r, 0) == (0, False)
        assert e.scheduler.scheduler.lookup_failures == 1
    finally:
        e.close()
