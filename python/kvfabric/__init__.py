"""kvfabric: the Python client of the kvfabric KV-cache fabric.

``kvfabric.Client`` speaks a node's HTTP API; :func:`models`, :func:`chunk_keys`,
:func:`fingerprint` and :func:`block_id` compute what the node computes, with its own Rust code
(the native module ``kvfabric._native``). ``kvfabric.vllm`` holds the vLLM connector and is the
only part that imports vLLM (and torch); importing ``kvfabric`` imports neither.
"""

from ._native import __version__
from .client import (
    BlockRead,
    Client,
    EngineBlock,
    Event,
    LookupResult,
    PutResult,
    key_hex,
)
from .errors import (
    BadRequest,
    ClientTimeout,
    Forbidden,
    Gone,
    KvFabricError,
    NodeError,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    ServerError,
    StoreFull,
    TransportError,
    Unauthorized,
    Unavailable,
    VerificationError,
)
from .models import (
    Layer,
    Model,
    Region,
    block_id,
    chunk_keys,
    fingerprint,
    model,
    models,
    namespace_key,
)

__all__ = [
    "BadRequest",
    "BlockRead",
    "Client",
    "ClientTimeout",
    "EngineBlock",
    "Event",
    "Forbidden",
    "Gone",
    "KvFabricError",
    "Layer",
    "LookupResult",
    "Model",
    "NodeError",
    "NotFound",
    "PayloadTooLarge",
    "PutResult",
    "Region",
    "RequestTimeout",
    "ServerError",
    "StoreFull",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "VerificationError",
    "__version__",
    "block_id",
    "chunk_keys",
    "fingerprint",
    "key_hex",
    "model",
    "models",
    "namespace_key",
]
