"""What the scheduler-side connector tells the workers each step (pickled by vLLM)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata


@dataclass
class LoadSpec:
    """Blocks to load into one request's pages: request tokens ``[start, end)`` from the
    blocks ``chunks`` (``(chunk index, block id hex)``, in order); ``is_async`` loads are
    reported through ``get_finished``, the others complete in ``start_load_kv``."""

    req_id: str
    page_ids: list[int]
    chunks: list[tuple[int, str]]
    start: int
    end: int
    is_async: bool


@dataclass
class SaveSpec:
    """One whole chunk of a request to put: its key, the pages holding it (the request's pages
    from ``first_page`` on), and what the engine knows of it (its page hashes, the parent hash,
    its token ids, its LoRA id)."""

    req_id: str
    chunk: int
    key: bytes
    page_ids: list[int]
    first_page: int
    token_ids: list[int]
    engine_hashes: list[bytes | int]
    parent_hash: bytes | int | None
    lora_id: int | None
    lora_name: str | None = None


@dataclass
class KvFabricConnectorMetadata(KVConnectorMetadata):
    """One step's loads and saves, and the requests preempted in it."""

    loads: list[LoadSpec] = field(default_factory=list)
    saves: list[SaveSpec] = field(default_factory=list)
    preempted: set[str] = field(default_factory=set)
