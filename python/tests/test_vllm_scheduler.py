"""vLLM's own Scheduler drives the connector (it builds it through the factory and calls every
scheduler hook), with the model runner's part played by the harness, against real nodes."""

from __future__ import annotations

import pytest
import torch

from kvfabric.vllm.harness import V3, SchedulerEngine, tiny_model_dir

from conftest import Cluster, visible

B = V3.block_tokens


@pytest.fixture(scope="module")
def single_copy_cluster(tmp_path_factory):
    """Three nodes, replication 1: a block put through n1 is held by n1 alone."""
    c = Cluster(
        tmp_path_factory.mktemp("single"), 3, "--replication", "1", "--host-bytes", "64 MiB"
    )
    yield c
    c.down()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("model"))


def _prompt(seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 129_000, (3 * B + 9,), generator=g).tolist()


def _running_with(rid: str, tokens: int):
    def done(e: SchedulerEngine) -> bool:
        r = e.vllm.requests.get(rid)
        return r is not None and r.status.name == "RUNNING" and r.num_computed_tokens >= tokens

    return done


def _gone(rid: str):
    return lambda e: rid not in e.vllm.requests


@pytest.mark.parametrize("remote", [True, False])
def test_vllms_scheduler_saves_through_one_node_and_loads_through_another(
    single_copy_cluster, model_dir, remote
):
    """``remote``: the loading engine is bound to n3, which holds none of the blocks (an
    asynchronous load: vLLM parks the request until the workers report it received);
    otherwise to n1, which holds them all (a synchronous load inside ``start_load_kv``)."""
    cluster = single_copy_cluster
    seed = 141 + remote  # prompts and latents of their own: a key names the first block put,
    prompt = _prompt(seed)  # and equal latents are one block (content-addressed)
    a = SchedulerEngine(cluster.url(1), model_dir, model="deepseek-v3")
    b = None
    try:
        a.add("p", prompt, seed=seed)
        a.run(_gone("p"))  # prefilled, sampled, finished, its pages freed after the puts
        assert a.workers[0].worker.stats["saved"] == 3
        keys = a.scheduler.scheduler.keys(a.request("probe", prompt), 3)
        owners = [f.owners for f in visible(cluster.url(3), keys)]
        assert owners == [("n1",)] * 3
        b = SchedulerEngine(cluster.url(3 if remote else 1), model_dir, model="deepseek-v3")
        q = b.add("q", prompt, seed=seed)
        seen = set()
        running = _running_with("q", 3 * B + 9)

        def until(e):
            seen.add(q.status.name)
            return running(e)

        errors = b.run(until)
        assert ("WAITING_FOR_REMOTE_KVS" in seen) == remote, seen
        assert errors == []
        assert b.workers[0].worker.stats["loaded"] == 3
        assert [t for r, t in b.computed if r == "q"] == list(range(3 * B, 3 * B + 9)), (
            "vLLM computed only the tokens past the loaded blocks"
        )
        want = torch.stack([a.latent(t) for t in range(3 * B)])
        assert torch.equal(b.rows_of("q", 0, 3 * B).view(torch.int16), want.view(torch.int16))
    finally:
        a.close()
        if b is not None:
            b.close()


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_a_block_that_fails_verification_is_recomputed_or_fails_the_request(
    cluster, model_dir, monkeypatch, policy
):
    """vLLM's ``kv_load_failure_policy``: ``recompute`` recomputes from the failed block on;
    ``fail`` (vLLM's default) ends the request with an error. Never a wrong block loaded."""
    prompt = _prompt(42)
    a = SchedulerEngine(cluster.url(2), model_dir, model="deepseek-v3")
    b = SchedulerEngine(cluster.url(2), model_dir, failure_policy=policy, model="deepseek-v3")
    try:
        a.add("p", prompt, seed=42)
        a.run(_gone("p"))
        worker = b.workers[0].worker
        keys = b.scheduler.scheduler.keys(b.request("probe", prompt), 3)
        second = visible(cluster.url(2), keys)[1].block
        real = worker.client.get_into

        def corrupt_second(block, out, **kw):
            info = real(block, out, **kw)
            if block == second:
                out[4096] ^= 0x10
            return info

        monkeypatch.setattr(worker.client, "get_into", corrupt_second)
        q = b.add("q", prompt, seed=42)
        if policy == "fail":
            errors = b.run(_gone("q"))
            assert errors and q.status.name == "FINISHED_ERROR"
            assert all(t >= 3 * B for r, t in b.computed if r == "q")
            return
        errors = b.run(_running_with("q", 3 * B + 9))
        assert errors, "the failed block's pages were reported"
        assert worker.stats["load_failed"] == 2 and worker.stats["loaded"] == 1
        recomputed = [t for r, t in b.computed if r == "q"]
        # The step that found the failure still ran its forward (a synchronous load's errors are
        # reported with that step's output, which vLLM then discards); vLLM then recomputed
        # from the failed block on, and never the block that loaded.
        assert recomputed[:9] == list(range(3 * B, 3 * B + 9))
        assert recomputed[9:] == list(range(B, 3 * B + 9)), "recomputed from the failed block"
        want = torch.stack([a.latent(t) for t in range(3 * B)])
        assert torch.equal(b.rows_of("q", 0, 3 * B).view(torch.int16), want.view(torch.int16))
    finally:
        a.close()
        b.close()
