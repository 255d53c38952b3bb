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


def vllm_config(url: str, page_tokens: int, tp: int = 1, rank: int = 0, **extra) -> VllmConfig:
    ktc = KVTransferConfig(
        kv_connector="KvFabricConnector",
        kv_connector_module_path="kvfabric.vllm",
        kv_role="kv_both",
        kv_connector_extra_config={"url": url, "model": MODEL, **extra},
    )
    cfg = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        kv_transfer_config=ktc,
        cache_config=CacheConfig(block_size=page_tokens),
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
