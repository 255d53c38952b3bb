"""The geometry presets (the node's, embedded in the native module) and the keys and ids
computed from them by the store's own code.

A block's payload is layer-major; inside a layer, region-major (for MLA: ``c_kv`` rows, then
``k_rope`` rows). :class:`Region` says where one region of one layer sits in a block's
payload: ``offset`` and ``nbytes`` from the payload's start, ``rows`` rows of ``dims``
elements of ``dtype`` (``row_bytes`` each).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from . import _native


@dataclass(frozen=True)
class Region:
    """One region of one layer of a block."""

    name: str  #: ``c_kv``, ``k_rope`` (MLA); ``rope``, ``content``, ``indexer`` (hybrid)
    dtype: str  #: ``bf16``, ``f16``, ``f32``, ``fp8``, ``fp4``
    dims: int
    rows: int
    offset: int
    nbytes: int
    row_bytes: int


@dataclass(frozen=True)
class Layer:
    """One layer's slice of a block: its rows and regions (empty for a V4 SWA layer)."""

    index: int
    scheme: str | None  #: ``csa``, ``hca``, ``swa`` for the V4 hybrid, else None
    rows: int
    tokens_per_row: int
    offset: int
    nbytes: int
    regions: tuple[Region, ...]

    def region(self, name: str) -> Region:
        """The region called ``name``."""
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"layer {self.index} has no region {name!r}")


@dataclass(frozen=True)
class Model:
    """A preset: its kind, block size (tokens and payload bytes), fingerprint and layout."""

    name: str
    kind: str  #: ``mla``, ``hybrid`` or ``gqa`` (accounting only, not storable)
    num_layers: int
    block_tokens: int
    block_bytes: int
    header_bytes: int
    storable: bool
    fingerprint: bytes
    attention: dict
    layers: tuple[Layer, ...]

    @property
    def kv_lora_rank(self) -> int:
        """MLA latent width (``c_kv`` dims)."""
        return int(self.attention["kv_lora_rank"])

    @property
    def rope_dim(self) -> int:
        """MLA rotary key width (``k_rope`` dims)."""
        return int(self.attention["rope_dim"])


def _model(d: dict) -> Model:
    layers = tuple(
        Layer(
            index=lay["index"],
            scheme=lay["scheme"],
            rows=lay["rows"],
            tokens_per_row=lay["tokens_per_row"],
            offset=lay["offset"],
            nbytes=lay["bytes"],
            regions=tuple(
                Region(
                    r["name"],
                    r["dtype"],
                    r["dims"],
                    lay["rows"],
                    r["offset"],
                    r["bytes"],
                    r["row_bytes"],
                )
                for r in lay["regions"]
            ),
        )
        for lay in d["layer_layout"]
    )
    return Model(
        name=d["name"],
        kind=d["kind"],
        num_layers=d["layers"],
        block_tokens=d["block_tokens"],
        block_bytes=d["block_bytes"],
        header_bytes=d["header_bytes"],
        storable=d["storable"],
        fingerprint=bytes.fromhex(d["fingerprint"]),
        attention=d["attention"],
        layers=layers,
    )


@lru_cache(maxsize=1)
def _all() -> tuple[Model, ...]:
    return tuple(_model(d) for d in json.loads(_native.models_json()))


def models() -> list[Model]:
    """Every preset (the copies of ``configs/models/*.toml`` embedded in the module)."""
    return list(_all())


def model(name: str) -> Model:
    """The preset called ``name`` (KeyError naming the presets if there is none)."""
    for m in _all():
        if m.name == name:
            return m
    raise KeyError(f"unknown model {name!r} (expected one of {', '.join(m.name for m in _all())})")


def fingerprint(model: str) -> bytes:
    """The 16-byte geometry fingerprint of preset ``model``."""
    return _native.fingerprint(model)


def namespace_key(name: str) -> bytes:
    """The 32-byte public key of namespace ``name``: what its chunk keys are keyed by (from the
    name alone). Block ids use the node's key of the namespace, derived from the cluster's
    secret: :meth:`kvfabric.Client.namespace_keys`."""
    return _native.namespace_key(name)


def chunk_keys(
    model: str, tokens: Sequence[int], mode: str = "prefix", namespace: str = "default"
) -> list[bytes]:
    """The 32-byte keys of every whole ``block_tokens`` chunk of ``tokens`` (``mode``:
    ``prefix`` chained or ``independent``), as ``crates/store/src/chunk.rs`` computes them."""
    return _native.chunk_keys(model, list(tokens), mode, namespace)


def block_id(model: str, payload, key: bytes) -> bytes:
    """The 32-byte id the store gives a canonical ``payload`` of ``model`` under the namespace
    ``key`` (32 bytes, as :meth:`kvfabric.Client.namespace_keys` gives it)."""
    from .buffers import byte_view

    return _native.block_id(model, byte_view(payload), bytes(key))
