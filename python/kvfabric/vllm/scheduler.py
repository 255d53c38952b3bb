"""The scheduler half of the connector: which chunks the fabric holds, which to load into a
request's pages, which to save, and when a finished request's pages may be freed.

- ``get_num_new_matched_tokens`` asks the node (``POST /v1/lookup``) for the request's chunk
  keys and counts the leading run of chunks whose block has a live owner now (a mapping with no
  owners cannot be loaded); it changes nothing on the node. The load is asynchronous when any
  of those blocks lives only on other nodes (the bound node fetches and verifies it first).
  A node that cannot be reached gives 0 (the engine computes), never an error.
- ``update_state_after_alloc`` turns the hit into a :class:`LoadSpec` over the pages vLLM
  allocated; ``build_connector_meta`` hands the step's loads to the workers, and a
  :class:`SaveSpec` for every chunk that this step completes (its KV written, its tokens
  known) and the fabric does not already hold.
- ``request_finished`` returns True for a request with saves issued: vLLM keeps its pages
  until every worker reports the request in ``finished_sending`` (its puts are done).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import KvFabricError
from ..models import model as preset
from .keys import request_chunk_keys
from .metadata import KvFabricConnectorMetadata, LoadSpec, SaveSpec

log = logging.getLogger("kvfabric.vllm")

#: Most chunk keys one lookup asks for (the node's default ``limits.max_lookup_keys``): a hit
#: longer than 65,536 tokens counts its first 1,024 blocks.
LOOKUP_KEYS_MAX = 1024


@dataclass
class _Hit:
    local: int  # tokens vLLM computed locally (block aligned), as it told us
    blocks: list[tuple[int, str]]  # the leading run: (chunk, block id)
    is_async: bool


@dataclass
class _Tracked:
    request: object
    page_ids: list[int]
    saved: int  # chunks below this are in the fabric or issued for saving
    saves_issued: bool = False


class SchedulerSide:
    """Scheduler-side state of one engine."""

    def __init__(self, cfg, page_tokens: int, load: bool, save: bool):
        self.cfg = cfg
        self.model = preset(cfg.model)
        self.block_tokens = self.model.block_tokens
        self.page_tokens = page_tokens
        self.load_enabled = load
        self.save_enabled = save
        self.client = cfg.client()
        self._hits: dict[str, _Hit] = {}
        self._loads: list[LoadSpec] = []
        self._reqs: dict[str, _Tracked] = {}
        self._keys: dict[str, list[bytes]] = {}
        self._node_id: str | None = None
        #: Lookups that failed (node unreachable or refusing); each counted as a miss.
        self.lookup_failures = 0

    # -- keys ------------------------------------------------------------------------------

    def keys(self, request, num_chunks: int) -> list[bytes]:
        """The request's first ``num_chunks`` chunk keys (cached; a request only grows)."""
        have = self._keys.get(request.request_id, [])
        if len(have) < num_chunks:
            have = request_chunk_keys(
                request, self.cfg.model, self.block_tokens, num_chunks, self.cfg.namespace
            )
            self._keys[request.request_id] = have
        return have[:num_chunks]

    def node_id(self) -> str | None:
        """The bound node's id (``n1``), from ``GET /v1/cluster`` (None when standalone)."""
        if self._node_id is None:
            try:
                for m in self.client.cluster().get("members", []):
                    if str(m.get("api", "")).rstrip("/") == self.client.url:
                        self._node_id = f"n{m['id']}" if str(m["id"]).isdigit() else str(m["id"])
            except KvFabricError as e:
                log.warning("kvfabric: cannot read %s/v1/cluster: %s", self.client.url, e)
        return self._node_id

    # -- vLLM hooks --------------------------------------------------------------------------

    def on_new_request(self, request) -> None:
        self._reqs.setdefault(request.request_id, _Tracked(request, [], 0))

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        if not self.load_enabled:
            return 0, False
        # vLLM must compute at least the prompt's last token itself.
        num_chunks = (request.num_tokens - 1) // self.block_tokens
        if num_chunks * self.block_tokens <= num_computed_tokens:
            return 0, False
        keys = self.keys(request, min(num_chunks, LOOKUP_KEYS_MAX))
        try:
            results = self.client.lookup(keys)
        except KvFabricError as e:
            self.lookup_failures += 1
            log.warning(
                "kvfabric: lookup for %s failed (computing instead): %s", request.request_id, e
            )
            return 0, False
        run: list[tuple[int, str]] = []
        remote = False
        me = self.node_id()
        for i, r in enumerate(results):
            if r.block is None or not r.owners:
                break
            run.append((i, r.block))
            remote = remote or me is None or me not in r.owners
        hit_tokens = len(run) * self.block_tokens
        if hit_tokens <= num_computed_tokens:
            self._hits.pop(request.request_id, None)
            return 0, False
        self._hits[request.request_id] = _Hit(num_computed_tokens, run, remote)
        return hit_tokens - num_computed_tokens, remote

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        t = self._reqs.setdefault(request.request_id, _Tracked(request, [], 0))
        t.request = request
        page_ids = list(blocks.get_block_ids()[0]) if blocks is not None else []
        if page_ids:
            t.page_ids = page_ids
        hit = self._hits.pop(request.request_id, None)
        if num_external_tokens == 0 or hit is None:
            return
        start, end = hit.local, hit.local + num_external_tokens
        n = self.block_tokens
        chunks = [(c, b) for c, b in hit.blocks if c * n < end and (c + 1) * n > start]
        self._loads.append(
            LoadSpec(request.request_id, list(t.page_ids), chunks, start, end, hit.is_async)
        )
        t.saved = max(t.saved, end // n)

    def build_connector_meta(self, scheduler_output) -> KvFabricConnectorMetadata:
        meta = KvFabricConnectorMetadata(
            loads=self._loads, preempted=set(scheduler_output.preempted_req_ids or ())
        )
        self._loads = []
        for r in meta.preempted:
            if r in self._reqs:
                self._reqs[r].page_ids = []
        if not self.save_enabled:
            return meta
        sched = scheduler_output.num_scheduled_tokens
        spec = scheduler_output.scheduled_spec_decode_tokens or {}
        for new in scheduler_output.scheduled_new_reqs:
            t = self._reqs.get(new.req_id)
            if t is None:
                continue
            t.page_ids = list(new.block_ids[0])
            done = (
                new.num_computed_tokens + sched.get(new.req_id, 0) - len(spec.get(new.req_id, ()))
            )
            meta.saves.extend(self._saves(t, done))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            t = self._reqs.get(req_id)
            if t is None:
                continue
            new_ids = cached.new_block_ids[i]
            if new_ids is not None:
                if req_id in cached.resumed_req_ids:
                    t.page_ids = list(new_ids[0])
                else:
                    t.page_ids.extend(new_ids[0])
            done = cached.num_computed_tokens[i] + sched.get(req_id, 0) - len(spec.get(req_id, ()))
            meta.saves.extend(self._saves(t, done))
        return meta

    def _saves(self, t: _Tracked, computed: int) -> list[SaveSpec]:
        req = t.request
        n, p = self.block_tokens, self.page_tokens
        tokens = req.all_token_ids
        complete = min(computed, len(tokens)) // n
        if complete <= t.saved or len(t.page_ids) * p < complete * n:
            return []
        keys = self.keys(req, complete)
        hashes = list(req.block_hashes)
        lora = getattr(req.lora_request, "lora_int_id", None) if req.lora_request else None
        lora_name = getattr(req.lora_request, "lora_name", None) if req.lora_request else None
        out = []
        for c in range(t.saved, complete):
            first, last = c * n // p, ((c + 1) * n - 1) // p
            out.append(
                SaveSpec(
                    req_id=req.request_id,
                    chunk=c,
                    key=keys[c],
                    page_ids=list(t.page_ids[first : last + 1]),
                    first_page=first,
                    token_ids=list(tokens[c * n : (c + 1) * n]),
                    engine_hashes=hashes[first : last + 1],
                    parent_hash=hashes[first - 1] if 0 < first <= len(hashes) else None,
                    lora_id=lora,
                    lora_name=lora_name,
                )
            )
        t.saved = complete
        t.saves_issued = True
        return out

    def request_finished(self, request, block_ids) -> tuple[bool, dict | None]:
        t = self._reqs.pop(request.request_id, None)
        self._keys.pop(request.request_id, None)
        self._hits.pop(request.request_id, None)
        return (t is not None and t.saves_issued), None
