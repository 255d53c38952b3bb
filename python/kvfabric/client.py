"""``kvfabric.Client``: the node's HTTP API (docs/API.md) from Python.

The HTTP exchange runs in the native module with the GIL released; a block read goes straight
into the caller's buffer (:meth:`Client.get_into`) and a put is sent from the caller's memory,
with no copy in Python. Every call is bounded (``timeout_s`` in all, ``connect_timeout_s`` to
connect), a 503 answer or a failed connection is retried at most ``retries`` times with a
doubling backoff (``backoff_s`` first, at most ``backoff_max_s``), and a refusal raises the
typed error of its status carrying the API's error code (:mod:`kvfabric.errors`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from . import _native
from .buffers import byte_view
from .errors import (
    ClientTimeout,
    KvFabricError,
    NodeError,
    TransportError,
    Unavailable,
    VerificationError,
    node_error,
)
from .models import model as _model

#: The open namespace of a node without tenants.
DEFAULT_NAMESPACE = "default"
#: Most bytes of a JSON answer read into memory.
JSON_BYTES_MAX = 64 << 20
#: Most bytes :meth:`Client.get` reads into memory (a Kimi K2 or V4-Pro block fits).
BLOCK_BYTES_MAX = 256 << 20
#: Most retries a client may be configured with.
RETRIES_MAX = 10


def key_hex(key: bytes | str) -> str:
    """A chunk key or block id as 64 lowercase hex digits (from 32 bytes or hex)."""
    if isinstance(key, (bytes, bytearray, memoryview)):
        b = bytes(key)
        if len(b) != 32:
            raise ValueError(f"expected a 32-byte key, found {len(b)} bytes")
        return b.hex()
    s = str(key).lower()
    if len(s) != 64 or any(c not in "0123456789abcdef" for c in s):
        raise ValueError(f"expected 64 hex digits, found {s[:80]!r}")
    return s


@dataclass(frozen=True)
class PutResult:
    """A put's answer: the block id, ``dedup`` (new / shared / collision), stored bytes
    (header + payload) and the verified copies on distinct nodes."""

    block: str
    dedup: str
    bytes: int
    replicas: int


@dataclass(frozen=True)
class BlockRead:
    """What a read returned besides the bytes: length, where it came from (``local`` or a
    node id), the tier and the model the node named."""

    nbytes: int
    source: str | None
    tier: str | None
    model: str | None
    verified: bool


@dataclass(frozen=True)
class LookupResult:
    """One chunk key's answer: its block (or None) and the live owners."""

    key: str
    block: str | None
    owners: tuple[str, ...]


@dataclass(frozen=True)
class Event:
    """One KV event: its kind (``stored``, ``removed``, ``epoch``, ``node_down``,
    ``replay_gap``), its JSON data, and ``id`` (``EPOCH:SEQ``) on a batch's last message."""

    event: str
    data: dict
    id: str | None


@dataclass(frozen=True)
class EngineBlock:
    """What an engine knows of a block it puts, for the KV events routers consume: the engine's
    name, its hashes of the pages the block covers (in order; vLLM's ``ExternalBlockHash``,
    bytes or int), the hash of the page before them (None for a prompt's first), its page size
    in tokens, the block's token ids, its LoRA id and name, and its KV-cache group and kind. The
    node keeps it with the block and publishes the block under it. Sent as headers (docs/API.md,
    "Engine metadata of a put")."""

    engine: str
    block_hashes: Sequence[bytes | int]
    parent_hash: bytes | int | None
    page_tokens: int
    token_ids: Sequence[int]
    lora_id: int | None = None
    lora_name: str | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None

    def headers(self) -> list[tuple[str, str]]:
        """The request headers carrying it."""

        def h(x: bytes | int) -> str:
            return x.hex() if isinstance(x, (bytes, bytearray)) else f"i:{int(x)}"

        out = [
            ("kvfabric-engine", self.engine),
            ("kvfabric-engine-block-hashes", ",".join(h(x) for x in self.block_hashes)),
            ("kvfabric-engine-page-tokens", str(int(self.page_tokens))),
            ("kvfabric-engine-token-ids", ",".join(str(int(t)) for t in self.token_ids)),
        ]
        if self.parent_hash is not None:
            out.append(("kvfabric-engine-parent-hash", h(self.parent_hash)))
        if self.lora_id is not None:
            out.append(("kvfabric-engine-lora-id", str(int(self.lora_id))))
        if self.lora_name is not None:
            out.append(("kvfabric-engine-lora-name", self.lora_name))
        if self.group_idx is not None:
            out.append(("kvfabric-engine-group-idx", str(int(self.group_idx))))
        if self.kv_cache_spec_kind is not None:
            out.append(("kvfabric-engine-kv-cache-spec-kind", self.kv_cache_spec_kind))
        return out


class Client:
    """A client of one kvfabric node.

    ``namespace`` names the namespace requests are narrowed to (``kvfabric-namespace``) and
    block ids are verified in; without it a client with no token verifies in ``default``
    (the open namespace) and one with a token does not verify reads (it cannot know which of
    the token's namespaces a block is in). Verification keys are the node's keys of that
    namespace (:meth:`namespace_keys`, asked once and again after a rotation), since the
    cluster derives them from its secret.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        namespace: str | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.05,
        backoff_max_s: float = 1.0,
    ):
        if not 0 <= retries <= RETRIES_MAX:
            raise ValueError(f"retries: expected 0 to {RETRIES_MAX}, found {retries}")
        if not (0 <= backoff_s <= backoff_max_s <= 60):
            raise ValueError(
                f"backoff: expected 0 <= backoff_s <= backoff_max_s <= 60, "
                f"found {backoff_s} and {backoff_max_s}"
            )
        self._http = _native.Http(url, token, timeout_s, connect_timeout_s)
        self.url = self._http.base
        self.namespace = namespace
        self.verify_namespace = namespace or (DEFAULT_NAMESPACE if token is None else None)
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._extra = [("kvfabric-namespace", namespace)] if namespace else []
        self._keys: list[bytes] | None = None
        #: Attempts retried so far (503 answers and failed connections).
        self.retried = 0

    def __repr__(self) -> str:
        return f"kvfabric.Client({self.url!r}, namespace={self.namespace!r})"

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, method, path, headers=(), body=None, out=None, body_max=JSON_BYTES_MAX):
        headers = list(headers) + self._extra
        body_view = byte_view(body) if body is not None else None
        out_view = byte_view(out, writable=True) if out is not None else None
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                status, hdrs, data, written = self._http.request(
                    method, path, headers, body_view, out_view, body_max
                )
            except TimeoutError as e:
                if last:
                    raise ClientTimeout(str(e)) from None
            except ConnectionError as e:
                if last or method == "DELETE":
                    raise TransportError(str(e)) from None
            except ValueError as e:
                raise KvFabricError(str(e)) from None
            else:
                if status < 300:
                    return status, dict(hdrs), data, written
                err = node_error(status, data, method, path)
                if not isinstance(err, Unavailable) or last:
                    raise err
            self.retried += 1
            time.sleep(delay)
            delay = min(delay * 2, self.backoff_max_s)
        raise AssertionError("unreachable")

    def _json(self, method, path, payload=None, headers=()):
        body = json.dumps(payload).encode() if payload is not None else None
        hdrs = list(headers)
        if body is not None:
            hdrs.append(("content-type", "application/json"))
        _, _, data, _ = self._call(method, path, hdrs, body)
        return json.loads(data) if data else None

    # -- blocks -----------------------------------------------------------------------------

    def put(
        self,
        payload,
        model: str,
        *,
        tokens: int | None = None,
        chunk_key: bytes | str | None = None,
        chunk_key_independent: bytes | str | None = None,
        position: int | None = None,
        engine: EngineBlock | None = None,
    ) -> PutResult:
        """``PUT /v1/blocks``: seal ``payload`` (any buffer, sent without a copy) as a block of
        ``model``; ``tokens`` defaults to the model's block tokens."""
        if tokens is None:
            tokens = _model(model).block_tokens
        headers = [
            ("kvfabric-model", model),
            ("kvfabric-tokens", str(int(tokens))),
            ("content-type", "application/octet-stream"),
        ]
        if chunk_key is not None:
            headers.append(("kvfabric-chunk-key", key_hex(chunk_key)))
        if chunk_key_independent is not None:
            headers.append(("kvfabric-chunk-key-independent", key_hex(chunk_key_independent)))
        if position is not None:
            headers.append(("kvfabric-position", str(int(position))))
        if engine is not None:
            headers.extend(engine.headers())
        answer = self._json_put(headers, payload)
        return PutResult(answer["block"], answer["dedup"], answer["bytes"], answer["replicas"])

    def _json_put(self, headers, payload):
        _, _, data, _ = self._call("PUT", "/v1/blocks", headers, payload)
        return json.loads(data)

    def get_into(
        self,
        block: bytes | str,
        out,
        *,
        position: int | None = None,
        verify: bool | None = None,
    ) -> BlockRead:
        """``GET /v1/blocks/{id}`` straight into ``out`` (a writable buffer: bytearray, numpy
        array, CPU torch tensor); the body must fit. ``verify`` (default: when the namespace is
        known and the read is not rotated) hashes the bytes against the id and raises
        :class:`VerificationError` on a mismatch."""
        bid = key_hex(block)
        path = f"/v1/blocks/{bid}" + (f"?position={int(position)}" if position is not None else "")
        view = byte_view(out, writable=True)
        _, hdrs, _, written = self._call("GET", path, out=view)
        model = hdrs.get("kvfabric-model")
        do_verify = (
            verify
            if verify is not None
            else (self.verify_namespace is not None and position is None)
        )
        if do_verify:
            self._verify(bid, model, view[:written])
        return BlockRead(
            written, hdrs.get("kvfabric-source"), hdrs.get("kvfabric-tier"), model, do_verify
        )

    def get(
        self, block: bytes | str, *, position: int | None = None, verify: bool | None = None
    ) -> bytes:
        """``GET /v1/blocks/{id}``: the payload as bytes (see :meth:`get_into`)."""
        bid = key_hex(block)
        path = f"/v1/blocks/{bid}" + (f"?position={int(position)}" if position is not None else "")
        _, hdrs, data, _ = self._call("GET", path, body_max=BLOCK_BYTES_MAX)
        do_verify = (
            verify
            if verify is not None
            else (self.verify_namespace is not None and position is None)
        )
        if do_verify:
            self._verify(bid, hdrs.get("kvfabric-model"), data)
        return data

    def _verify(self, bid: str, model: str | None, payload) -> None:
        if model is None:
            raise VerificationError(bid, "nothing: the node named no model for the block")
        self.verify(bid, model, payload)

    def verify(self, block: bytes | str, model: str, payload) -> None:
        """Raises :class:`VerificationError` unless ``payload`` (a canonical block of ``model``)
        hashes to ``block`` under one of the verify namespace's keys. The keys are asked of
        the node once; on a mismatch they are asked again (the cluster's secret may have been
        rotated) before the block is refused."""
        bid = key_hex(block)
        if self.verify_namespace is None:
            raise KvFabricError("cannot verify: the client has a token but no namespace")
        found = None
        for fresh in (False, True):
            for key in self.namespace_keys(refresh=fresh):
                try:
                    found = _native.block_id(model, payload, key).hex()
                except (ValueError, KeyError) as e:
                    raise VerificationError(bid, f"nothing: {e}") from None
                if found == bid:
                    return
        raise VerificationError(bid, found or "nothing: the node listed no key")

    def namespaces(self) -> list[dict]:
        """``GET /v1/namespaces``: the namespaces this client may read (narrowed to its
        ``namespace`` if set), each with ``name``, ``access`` (``write`` or ``read``),
        ``shared`` and ``keys`` (hex; the one puts use first)."""
        return self._json("GET", "/v1/namespaces")["namespaces"]

    def namespace_keys(self, *, refresh: bool = False) -> list[bytes]:
        """The 32-byte keys block ids of the verify namespace are computed under (the one
        puts use first), asked of the node once (``refresh`` asks again)."""
        if self._keys is None or refresh:
            name = self.verify_namespace
            self._keys = [
                bytes.fromhex(k)
                for ns in self.namespaces()
                if ns["name"] == name
                for k in ns["keys"]
            ]
        return self._keys

    def head(self, block: bytes | str) -> BlockRead | None:
        """``HEAD /v1/blocks/{id}``: this node's copy (length, tier), or None if it has none."""
        try:
            _, hdrs, _, _ = self._call("HEAD", f"/v1/blocks/{key_hex(block)}")
        except NodeError as e:
            if e.status == 404:
                return None
            raise
        return BlockRead(
            int(hdrs.get("content-length", 0)),
            hdrs.get("kvfabric-source"),
            hdrs.get("kvfabric-tier"),
            None,
            False,
        )

    def delete(self, block: bytes | str) -> None:
        """``DELETE /v1/blocks/{id}``: drop this node's reference (404 raises NotFound)."""
        self._call("DELETE", f"/v1/blocks/{key_hex(block)}")

    # -- keys, routes, events -----------------------------------------------------------------

    def lookup(
        self, keys: Iterable[bytes | str], *, linearizable: bool = False
    ) -> list[LookupResult]:
        """``POST /v1/lookup``: each chunk key's block and live owners."""
        path = "/v1/lookup" + ("?consistency=linearizable" if linearizable else "")
        answer = self._json("POST", path, {"keys": [key_hex(k) for k in keys]})
        return [LookupResult(r["key"], r["block"], tuple(r["owners"])) for r in answer["results"]]

    def route(
        self,
        keys: Sequence[bytes | str],
        *,
        chunks: Sequence[bytes | str] | None = None,
        mode: str = "any",
        model: str | None = None,
    ) -> dict:
        """``POST /v1/route``: every candidate node scored for these chunks (the API's JSON)."""
        payload: dict = {"keys": [key_hex(k) for k in keys], "mode": mode}
        if chunks is not None:
            payload["chunks"] = [key_hex(k) for k in chunks]
        if model is not None:
            payload["model"] = model
        return self._json("POST", "/v1/route", payload)

    def cluster(self) -> dict:
        """``GET /v1/cluster``: members, leader, term, measured links."""
        return self._json("GET", "/v1/cluster")

    def node_models(self) -> list[dict]:
        """``GET /v1/models``: the presets the node serves."""
        return self._json("GET", "/v1/models")["models"]

    def events(
        self,
        *,
        since: int | None = None,
        last_event_id: str | None = None,
        read_timeout_s: float = 30.0,
    ) -> Iterator[Event]:
        """``GET /v1/events``: the node's KV events as they happen (ends when the node closes
        the stream; each read waits at most ``read_timeout_s``, then raises ClientTimeout)."""
        path = "/v1/events" + (f"?since={int(since)}" if since is not None else "")
        headers = list(self._extra)
        if last_event_id is not None:
            headers.append(("last-event-id", last_event_id))
        status, body, stream = self._http.open_events(path, headers, read_timeout_s)
        if stream is None:
            raise node_error(status, body, "GET", path)
        return _event_iter(stream)


def _event_iter(stream) -> Iterator[Event]:
    try:
        while True:
            try:
                m = stream.next_message()
            except TimeoutError as e:
                raise ClientTimeout(str(e)) from None
            except ConnectionError as e:
                raise TransportError(str(e)) from None
            if m is None:
                return
            event, data, eid = m
            yield Event(event, json.loads(data) if data else {}, eid)
    finally:
        stream.close()
