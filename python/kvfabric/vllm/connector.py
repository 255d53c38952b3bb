"""``KvFabricConnector``: vLLM's ``KVConnectorBase_V1`` over a kvfabric node.

Loaded by vLLM from its module path::

    --kv-transfer-config '{"kv_connector": "KvFabricConnector",
                           "kv_connector_module_path": "kvfabric.vllm",
                           "kv_role": "kv_both",
                           "kv_load_failure_policy": "recompute",
                           "kv_connector_extra_config": {"url": "http://127.0.0.1:7101"}}'

The scheduler half is :mod:`kvfabric.vllm.scheduler`, the worker half
:mod:`kvfabric.vllm.worker`; keys are :mod:`kvfabric.vllm.keys`, the page ↔ block mapping
:mod:`kvfabric.vllm.layout`, the settings :mod:`kvfabric.vllm.config`.
"""

from __future__ import annotations

from typing import Any

import vllm
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorRole,
    KVConnectorTransferResults,
)
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from . import config as _config
from .metadata import KvFabricConnectorMetadata
from .scheduler import SchedulerSide
from .worker import WorkerSide


def _tp_rank(vllm_config) -> int:
    from vllm.distributed import parallel_state as ps

    if ps.model_parallel_is_initialized():
        return ps.get_tensor_model_parallel_rank()
    pc = vllm_config.parallel_config
    return pc.rank % max(1, pc.tensor_parallel_size)


def _check_parallelism(vllm_config) -> None:
    pc = vllm_config.parallel_config
    for name in (
        "pipeline_parallel_size",
        "decode_context_parallel_size",
        "prefill_context_parallel_size",
    ):
        if getattr(pc, name, 1) not in (1, None):
            raise ValueError(
                f"KvFabricConnector: {name} = {getattr(pc, name)} splits a block's layers or "
                "tokens across workers; only tensor parallelism is supported"
            )


class KvFabricConnector(KVConnectorBase_V1):
    """vLLM KV connector that loads and saves MLA KV blocks through a kvfabric node."""

    _cache_hit_source = CacheHitSource.P2P

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        _check_parallelism(vllm_config)
        self.cfg = _config.parse(vllm_config)
        page_tokens = vllm_config.cache_config.block_size
        ktc = self._kv_transfer_config
        self.scheduler: SchedulerSide | None = None
        self.worker: WorkerSide | None = None
        if role == KVConnectorRole.SCHEDULER:
            self.scheduler = SchedulerSide(
                self.cfg, page_tokens, load=ktc.is_kv_consumer, save=ktc.is_kv_producer
            )
        else:
            self.worker = WorkerSide(
                self.cfg, page_tokens, _tp_rank(vllm_config), engine=f"vllm/{vllm.__version__}"
            )

    @property
    def requires_kv_delivery(self) -> bool:
        # A dropped save is a future miss, not a lost hand-off.
        return False

    # -- worker side ---------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches) -> None:
        self.worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        self.worker.start_load_kv(self._get_connector_metadata())

    def wait_for_layer_load(self, layer_name: str) -> None:
        # Every load a forward needs is complete when start_load_kv returns (see worker.py).
        return

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs: Any) -> None:
        # A block spans every layer: chunks are gathered once, in wait_for_save.
        return

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvFabricConnectorMetadata)
        self.worker.wait_for_save(meta)

    def handle_preemptions(self, kv_connector_metadata) -> None:
        if isinstance(kv_connector_metadata, KvFabricConnectorMetadata):
            self.worker.handle_preemptions(kv_connector_metadata)

    def get_finished(self, finished_req_ids: set[str]):
        return self.worker.get_finished(finished_req_ids)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        sending, recving = self.worker.get_finished(finished_req_ids)
        pages, reqs = self.worker.take_failures()
        self._pending_failed_pages = getattr(self, "_pending_failed_pages", set()) | pages
        recving = set(recving or ())
        return KVConnectorTransferResults(
            finished_sending=set(sending or ()),
            finished_recving=recving,
            failed_recving=reqs & recving,
        )

    def get_block_ids_with_load_errors(self) -> set[int]:
        pages, _ = self.worker.take_failures()
        out = getattr(self, "_pending_failed_pages", set()) | pages
        self._pending_failed_pages = set()
        return out

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()

    # -- scheduler side ------------------------------------------------------------------------

    def on_new_request(self, request) -> None:
        self.scheduler.on_new_request(request)

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        return self.scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        self.scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output) -> KvFabricConnectorMetadata:
        return self.scheduler.build_connector_meta(scheduler_output)

    def request_finished(self, request, block_ids) -> tuple[bool, dict | None]:
        return self.scheduler.request_finished(request, block_ids)
