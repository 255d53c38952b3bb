"""The worker half of the connector: blocks in and out of this worker's MLA cache.

Loads: every block of a :class:`LoadSpec` is read from the node into a host buffer
(``GET /v1/blocks/{id}``, the node verifying what it fetches from peers or reads from disk),
hashed here against the id the lookup named, and only then copied into the pages. A block that
cannot be fetched or does not verify is never copied: its pages (and those of the request's
later chunks, which are not loaded either) are reported by ``get_block_ids_with_load_errors``
and vLLM recomputes them. Loads that are not asynchronous complete inside ``start_load_kv``
(one GET brings every layer, so ``wait_for_layer_load`` has nothing left to wait for);
asynchronous ones run on the I/O threads and are reported by ``get_finished``.

Saves: only tensor-parallel rank 0 puts (the MLA latent is the same on every rank, so a block
is written once per TP group); ``wait_for_save`` queues the step's chunks on the I/O threads,
each gathered from the pages into a host buffer and put with its chunk key and the engine's
metadata. Every rank reports a finished request in ``finished_sending`` once its puts are done
(at once on ranks that do not save), which is when vLLM frees its pages.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor, wait

from ..client import EngineBlock
from ..errors import KvFabricError, VerificationError
from ..models import model as preset
from .layout import MlaPages
from .metadata import KvFabricConnectorMetadata, LoadSpec, SaveSpec

log = logging.getLogger("kvfabric.vllm")


class WorkerSide:
    """Worker-side state of one worker (one TP rank)."""

    def __init__(self, cfg, page_tokens: int, tp_rank: int, engine: str):
        self.cfg = cfg
        self.model = preset(cfg.model)
        self.page_tokens = page_tokens
        self.tp_rank = tp_rank
        self.saves = tp_rank == 0
        self.engine = engine
        self.client = cfg.client()
        self.pages: MlaPages | None = None
        # Transfers; and, apart, the asynchronous loads that wait on them (no pool waits on
        # itself).
        self._pool = ThreadPoolExecutor(cfg.io_threads, thread_name_prefix="kvfabric-io")
        self._load_pool = ThreadPoolExecutor(cfg.io_threads, thread_name_prefix="kvfabric-load")
        self._lock = threading.Lock()
        self._failed_pages: set[int] = set()
        self._failed_reqs: set[str] = set()
        self._async_loads: dict[str, Future] = {}
        self._pending_saves: dict[str, list[Future]] = defaultdict(list)
        self._save_reqs: set[str] = set()
        self._finishing: set[str] = set()
        #: Counters: blocks loaded, blocks whose load failed, blocks saved, saves that failed.
        self.stats = {"loaded": 0, "load_failed": 0, "saved": 0, "save_failed": 0}

    def register_kv_caches(self, kv_caches) -> None:
        self.pages = MlaPages(self.model, kv_caches, self.page_tokens)

    # -- loads -----------------------------------------------------------------------------

    def _fetch(self, block: str):
        """The verified payload of ``block`` in a host buffer, or the reason it is not."""
        buf = self.pages.new_block()
        try:
            self.client.get_into(block, buf, verify=False)
        except KvFabricError as e:
            return None, f"fetching: {e}"
        except Exception as e:  # anything else is a failed load too, never a crashed step
            return None, f"fetching: {type(e).__name__}: {e}"
        try:
            self.client.verify(block, self.model.name, buf.numpy())
        except VerificationError as e:
            return None, f"verification: the bytes read hash to {e.found}"
        except Exception as e:  # keys not obtainable: a failed load, never a crashed step
            return None, f"verification: {type(e).__name__}: {e}"
        return buf, None

    def _load(self, spec: LoadSpec) -> None:
        """Loads one request's blocks in order; stops at the first that fails."""
        n = self.model.block_tokens
        futures = [self._pool.submit(self._fetch, b) for _, b in spec.chunks]
        failed_from = None
        for (chunk, block), fut in zip(spec.chunks, futures, strict=True):
            first, end = max(spec.start, chunk * n), min(spec.end, (chunk + 1) * n)
            if failed_from is not None:
                continue
            buf, why = fut.result()
            if buf is None:
                failed_from = first
                log.warning(
                    "kvfabric: %s chunk %d block %s not loaded (%s)", spec.req_id, chunk, block, why
                )
                continue
            try:
                self.pages.scatter(buf, spec.page_ids, chunk, first, end)
            except Exception as e:  # pages possibly half written: reported, so recomputed
                failed_from = first
                log.warning("kvfabric: %s chunk %d not copied: %s", spec.req_id, chunk, e)
                continue
            with self._lock:
                self.stats["loaded"] += 1
        if failed_from is not None:
            bad = self.pages.pages_of(spec.page_ids, failed_from, spec.end)
            with self._lock:
                self._failed_pages.update(bad)
                self._failed_reqs.add(spec.req_id)
                self.stats["load_failed"] += sum(
                    1 for c, _ in spec.chunks if (c + 1) * n > failed_from
                )

    def start_load_kv(self, meta: KvFabricConnectorMetadata) -> None:
        if self.pages is None:
            return
        for s in meta.loads:
            if s.is_async:
                self._async_loads[s.req_id] = self._load_pool.submit(self._load, s)
        for s in meta.loads:
            if not s.is_async:
                self._load(s)

    # -- saves -----------------------------------------------------------------------------

    def _save(self, spec: SaveSpec) -> None:
        try:
            buf = self.pages.new_block()
            self.pages.gather(buf, spec.page_ids, spec.chunk, spec.first_page)
            engine = EngineBlock(
                self.engine,
                spec.engine_hashes,
                spec.parent_hash,
                self.page_tokens,
                spec.token_ids,
                spec.lora_id,
                spec.lora_name,
            )
            self.client.put(buf, self.model.name, chunk_key=spec.key, engine=engine)
        except Exception as e:  # a lost save is a future miss, never a crashed step
            with self._lock:
                self.stats["save_failed"] += 1
            log.warning("kvfabric: saving %s chunk %d failed: %s", spec.req_id, spec.chunk, e)
            return
        with self._lock:
            self.stats["saved"] += 1

    def handle_preemptions(self, meta: KvFabricConnectorMetadata) -> None:
        """Waits for the saves of preempted requests: their pages are about to be reused."""
        for r in meta.preempted:
            wait(self._pending_saves.get(r, []))

    def wait_for_save(self, meta: KvFabricConnectorMetadata) -> None:
        for s in meta.saves:
            self._save_reqs.add(s.req_id)
            if self.saves and self.pages is not None:
                self._pending_saves[s.req_id].append(self._pool.submit(self._save, s))

    # -- completions -----------------------------------------------------------------------

    def get_finished(self, finished_req_ids: set[str]):
        self._finishing.update(r for r in finished_req_ids if r in self._save_reqs)
        sending = set()
        for r in list(self._finishing):
            if all(f.done() for f in self._pending_saves.get(r, [])):
                sending.add(r)
                self._finishing.discard(r)
                self._save_reqs.discard(r)
                self._pending_saves.pop(r, None)
        recving = {r for r, f in self._async_loads.items() if f.done()}
        for r in recving:
            self._async_loads.pop(r).result()
        return sending or None, recving or None

    def take_failures(self) -> tuple[set[int], set[str]]:
        """Pages whose load failed and the requests they belong to, since the last call."""
        with self._lock:
            pages, reqs = self._failed_pages, self._failed_reqs
            self._failed_pages, self._failed_reqs = set(), set()
        return pages, reqs

    def shutdown(self) -> None:
        self._load_pool.shutdown(wait=True)
        self._pool.shutdown(wait=True)
