"""A CPU harness that drives the connector with vLLM's own objects, for the tests and the
benchmark: configs, connectors built by vLLM's ``KVConnectorFactory``, requests with vLLM's
block hasher, pages from vLLM's ``BlockPool``, MLA caches from vLLM's ``allocate_kv_cache``
(written by vLLM's CPU MLA backend), and ``SchedulerOutput``s.

What the harness plays itself is only what vLLM's model runner does around a forward pass:
calling the worker hooks in the order ``execute_model`` calls them
(``vllm/v1/worker/kv_connector_model_runner_mixin.py``). It needs no GPU.
"""

from __future__ import annotations

import time

import torch
from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_manager import KVCacheBlocks
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput
from vllm.v1.kv_cache_interface import (
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MLAAttentionSpec,
)
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.request import Request
from vllm.v1.worker.utils import allocate_kv_cache

from ..models import model as preset

MODEL = "deepseek-v3"
V3 = preset(MODEL)
WIDTH = V3.kv_lora_rank + V3.rope_dim
LAYERS = [f"model.layers.{i}.self_attn.attn" for i in range(V3.num_layers)]
#: Bound on waiting for asynchronous transfers.
TRANSFER_WAIT_S = 120

init_none_hash(sha256)


def vllm_config(
    url: str,
    page_tokens: int,
    tp: int = 1,
    rank: int = 0,
    model_dir=None,
    failure_policy: str = "recompute",
    **extra,
) -> VllmConfig:
    """A config with the connector bound to ``url``; with ``model_dir`` (see
    :func:`tiny_model_dir`) also a model and a scheduler config, as vLLM's Scheduler needs."""
    ktc = KVTransferConfig(
        kv_connector="KvFabricConnector",
        kv_connector_module_path="kvfabric.vllm",
        kv_role="kv_both",
        kv_connector_extra_config={"url": url, "model": MODEL, **extra},
        kv_load_failure_policy=failure_policy,
    )
    more = {}
    if model_dir is not None:
        from vllm.config import ModelConfig, SchedulerConfig

        more["model_config"] = ModelConfig(
            model=str(model_dir), skip_tokenizer_init=True, dtype="bfloat16", max_model_len=4096
        )
        more["scheduler_config"] = SchedulerConfig(
            max_num_batched_tokens=4096,
            max_num_seqs=8,
            max_model_len=4096,
            is_encoder_decoder=False,
        )
    cfg = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        kv_transfer_config=ktc,
        cache_config=CacheConfig(block_size=page_tokens),
        **more,
    )
    cfg.parallel_config.tensor_parallel_size = tp
    cfg.parallel_config.rank = rank
    return cfg


def kv_cache_config(page_tokens: int, num_pages: int, layout: KVCacheLayout) -> KVCacheConfig:
    spec = MLAAttentionSpec(
        block_size=page_tokens, num_kv_heads=1, head_size=WIDTH, dtype=torch.bfloat16
    )
    page = spec.page_size_bytes
    n = len(LAYERS)
    layer_stride, block_stride = (
        (page * num_pages, page) if layout.is_layer_compact else (page, page * n)
    )
    return KVCacheConfig(
        num_blocks=num_pages,
        kv_cache_tensors=[KVCacheTensor(page * num_pages * n, LAYERS, layer_stride, block_stride)],
        kv_cache_groups=[KVCacheGroupSpec(LAYERS, spec)],
    )


class Engine:
    """One engine: a scheduler-side connector and one worker-side connector per TP rank, each
    worker with its own MLA cache allocated by vLLM (filled with a sentinel)."""

    SENTINEL = -12345

    def __init__(
        self, url, page_tokens=16, tp=1, num_pages=64, layout=KVCacheLayout.LBHNC, **extra
    ):
        self.page_tokens = page_tokens
        self.kvc = kv_cache_config(page_tokens, num_pages, layout)
        self.scheduler = KVConnectorFactory.create_connector(
            vllm_config(url, page_tokens, tp, 0, **extra), KVConnectorRole.SCHEDULER, self.kvc
        )
        self.pool = BlockPool(
            num_gpu_blocks=num_pages, enable_caching=False, hash_block_size=page_tokens
        )
        self.workers, self.caches = [], []
        for rank in range(tp):
            w = KVConnectorFactory.create_connector(
                vllm_config(url, page_tokens, tp, rank, **extra), KVConnectorRole.WORKER, self.kvc
            )
            caches = allocate_kv_cache(self.kvc, torch.device("cpu"), layout, [page_tokens])
            for t in caches.values():
                t.view(torch.int16).fill_(self.SENTINEL)
            w.register_kv_caches(caches)
            self.workers.append(w)
            self.caches.append(caches)
        self.hasher = get_request_block_hasher(page_tokens, sha256)

    def request(self, rid: str, tokens, **kw) -> Request:
        r = Request(
            rid, list(tokens), SamplingParams(max_tokens=1), None, block_hasher=self.hasher, **kw
        )
        self.scheduler.on_new_request(r)
        return r

    def allocate(self, request: Request) -> KVCacheBlocks:
        n = -(-request.num_tokens // self.page_tokens)
        return KVCacheBlocks((self.pool.get_new_blocks(n),))

    def step(self, new=(), cached=(), finished=()) -> SchedulerOutput:
        """One engine step: the scheduler builds the metadata, every worker runs the hooks
        `execute_model` runs. ``new`` is ``(request, blocks, tokens scheduled)``; ``cached``
        (requests scheduled before) is ``(request, tokens computed, tokens scheduled)``."""
        so = SchedulerOutput.make_empty()
        for req, blocks, n in new:
            so.scheduled_new_reqs.append(NewRequestData.from_request(req, blocks.get_block_ids()))
            so.num_scheduled_tokens[req.request_id] = n
            so.total_num_scheduled_tokens += n
        cr = so.scheduled_cached_reqs
        for req, computed, n in cached:
            cr.req_ids.append(req.request_id)
            cr.new_token_ids.append([])
            cr.new_block_ids.append(None)
            cr.num_computed_tokens.append(computed)
            cr.num_output_tokens.append(req.num_output_tokens)
            so.num_scheduled_tokens[req.request_id] = n
            so.total_num_scheduled_tokens += n
        so.finished_req_ids = set(finished)
        meta = self.scheduler.build_connector_meta(so)
        self.outputs = []
        for w in self.workers:
            w.handle_preemptions(meta)
            w.bind_connector_metadata(meta)
            w.start_load_kv(None)
            w.wait_for_save()
            res = w.get_transfer_results(so.finished_req_ids)
            self.outputs.append((res, w.get_block_ids_with_load_errors()))
            w.clear_connector_metadata()
        return so

    def wait(self, kind: str, rid: str) -> set[int]:
        """Steps until every worker reported ``rid`` as ``kind`` (finished_sending or
        finished_recving); returns the load errors reported meanwhile."""
        errors: set[int] = set()
        seen = [False] * len(self.workers)
        deadline = time.monotonic() + TRANSFER_WAIT_S
        finished = {rid} if kind == "finished_sending" else set()
        while not all(seen):
            assert time.monotonic() < deadline, f"{rid} not {kind} in {TRANSFER_WAIT_S} s"
            self.step(finished=finished)
            finished = set()
            for i, (res, errs) in enumerate(self.outputs):
                errors |= errs
                seen[i] = seen[i] or rid in getattr(res, kind)
            time.sleep(0.02)
        return errors

    def write_request_kv(self, request: Request, blocks: KVCacheBlocks, seed: int) -> None:
        """Writes random latents for every token of ``request`` the way vLLM's CPU MLA backend
        writes its cache (``CPUMLAImpl.do_kv_cache_update``: c_kv then k_pe per slot), the same
        in every TP rank's cache (the latent does not depend on TP)."""
        from vllm.v1.attention.backends.mla.cpu_mla import CPUMLAImpl

        g = torch.Generator().manual_seed(seed)
        ids = blocks.get_block_ids()[0]
        slots = torch.tensor(
            [
                ids[t // self.page_tokens] * self.page_tokens + t % self.page_tokens
                for t in range(request.num_tokens)
            ]
        )
        for layer in LAYERS:
            c_kv = torch.randn(request.num_tokens, V3.kv_lora_rank, generator=g).bfloat16()
            k_pe = torch.randn(request.num_tokens, 1, V3.rope_dim, generator=g).bfloat16()
            for caches in self.caches:
                cache = caches[layer]
                if cache.is_contiguous():
                    CPUMLAImpl.do_kv_cache_update(None, c_kv, k_pe, cache, slots, "auto", None)
                else:  # a block-outermost layout: the same slots, addressed by page and row
                    pages, rows = slots // self.page_tokens, slots % self.page_tokens
                    cache[pages, 0, rows, : V3.kv_lora_rank] = c_kv
                    cache[pages, 0, rows, V3.kv_lora_rank :] = k_pe[:, 0]

    def token_rows(self, rank: int, blocks: KVCacheBlocks, start: int, end: int):
        """Every layer's rows of tokens [start, end), as int16 (bits)."""
        ids = blocks.get_block_ids()[0]
        pages = torch.tensor([ids[t // self.page_tokens] for t in range(start, end)])
        rows = torch.tensor([t % self.page_tokens for t in range(start, end)])
        return torch.stack(
            [self.caches[rank][layer][pages, 0, rows].view(torch.int16) for layer in LAYERS]
        )

    def close(self):
        for w in self.workers:
            w.shutdown()


def tiny_model_dir(root) -> str:
    """A model directory holding only a DeepSeek-V3-shaped ``config.json`` (the cache
    geometry of DeepSeek-V3 — 61 layers, ``kv_lora_rank`` 512, ``qk_rope_head_dim`` 64 — with
    small other dimensions): enough for vLLM's ``ModelConfig`` and ``Scheduler``, which never
    load weights."""
    import json
    import os

    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": V3.num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": V3.num_layers,
        "kv_lora_rank": V3.kv_lora_rank,
        "q_lora_rank": 64,
        "qk_rope_head_dim": V3.rope_dim,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
        "vocab_size": 129280,
        "max_position_embeddings": 4096,
        "rope_theta": 10000,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "config.json"), "w") as f:
        json.dump(cfg, f)
    return str(root)


class SchedulerEngine(Engine):
    """An :class:`Engine` whose scheduler side is vLLM's own ``Scheduler`` (which builds the
    connector through the factory and calls every scheduler hook itself); :meth:`run` plays
    the model runner: the worker hooks, a forward that writes each scheduled token's latent,
    one sampled token per finished prefill, and ``update_from_output``."""

    def __init__(
        self, url, model_dir, page_tokens=16, num_pages=64, failure_policy="recompute", **extra
    ):
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        super().__init__(url, page_tokens, 1, num_pages, **extra)
        cfg = vllm_config(
            url, page_tokens, model_dir=model_dir, failure_policy=failure_policy, **extra
        )
        cfg.cache_config.num_gpu_blocks = num_pages  # what profiling would have set
        self.vllm = Scheduler(cfg, self.kvc, StructuredOutputManager(cfg), block_size=page_tokens)
        #: (request, position) of every token the forward computed, in order.
        self.computed: list[tuple[str, int]] = []

    def add(self, rid: str, tokens, seed: int, max_tokens: int = 2) -> Request:
        """Adds a request to vLLM's scheduler (it stays running for ``max_tokens - 1`` decode
        steps after its prefill)."""
        r = Request(
            rid, list(tokens), SamplingParams(max_tokens=max_tokens), None, block_hasher=self.hasher
        )
        self.vllm.add_request(r)
        self.seed = seed
        return r

    def latent(self, t: int) -> torch.Tensor:
        """The latent rows (every layer) the forward writes for position ``t``."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + t)
        return torch.randn(len(LAYERS), WIDTH, generator=g).bfloat16()

    def rows_of(self, req_id: str, start: int, end: int) -> torch.Tensor:
        """Every layer's cache rows of a running request's tokens ``[start, end)``."""
        ids = self.vllm.kv_cache_manager.get_block_ids(req_id)[0]
        return torch.stack(
            [
                torch.stack(
                    [
                        self.caches[0][layer][ids[t // self.page_tokens], 0, t % self.page_tokens]
                        for layer in LAYERS
                    ]
                )
                for t in range(start, end)
            ]
        )

    def _forward(self, so) -> None:
        """Writes the latent of every token scheduled (a deterministic function of the seed, the
        request's prompt and the position), as the attention layers would."""
        for req_id, n in so.num_scheduled_tokens.items():
            req = self.vllm.requests[req_id]
            start = req.num_computed_tokens - n  # schedule() has already counted them
            ids = self.vllm.kv_cache_manager.get_block_ids(req_id)[0]
            for t in range(start, start + n):
                slot_page, row = ids[t // self.page_tokens], t % self.page_tokens
                rows = self.latent(t)
                self.computed.append((req_id, t))
                for caches in self.caches:
                    for i, layer in enumerate(LAYERS):
                        caches[layer][slot_page, 0, row] = rows[i]

    def run(self, until, steps_max: int = 200) -> list:
        """Steps until ``until(self)`` is true; returns the load errors reported on the way."""
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        errors = []
        for _ in range(steps_max):
            if until(self):
                return errors
            so = self.vllm.schedule()
            meta = so.kv_connector_metadata
            outs = []
            for w in self.workers:
                w.handle_preemptions(meta)
                w.bind_connector_metadata(meta)
                w.start_load_kv(None)
            self._forward(so)
            for w in self.workers:
                w.wait_for_save()
                res = w.get_transfer_results(so.finished_req_ids)
                outs.append((res, w.get_block_ids_with_load_errors()))
                w.clear_connector_metadata()
            res, bad = outs[0]
            errors.extend(bad)
            kv_out = KVConnectorOutput(
                finished_sending=res.finished_sending or None,
                finished_recving=res.finished_recving or None,
                invalid_block_ids=bad,
                failed_recving=res.failed_recving,
            )
            req_ids = list(so.num_scheduled_tokens)
            sampled = []
            for rid in req_ids:
                req = self.vllm.requests[rid]
                done = req.num_computed_tokens >= req.num_tokens
                sampled.append([2] if done else [])
            mro = ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                sampled_token_ids=sampled,
                kv_connector_output=kv_out,
            )
            self.vllm.update_from_output(so, mro)
            time.sleep(0.01)
        raise AssertionError(f"not done in {steps_max} steps")
