"""vLLM requests to kvfabric chunk keys.

vLLM keys its prefix cache by a chain of block hashes, ``hash(parent, page tokens, extra
keys)``, whose extra keys carry what besides tokens decides the KV: the LoRA adapter (name and
path, every page), the ``cache_salt`` (first page), multimodal items (identifier and offset, the
pages they overlap) and prompt-embedding digests. The hash values themselves depend on the
engine's hash algorithm and seed (``--prefix-caching-hash-algo``, ``PYTHONHASHSEED``) and on
its page size, so they cannot name a block across engines. The connector maps the chain's
*inputs* instead:

- a request is cut into chunks of the preset's ``block_tokens`` (64 for MLA) tokens;
- chunk ``i``'s extra keys are what vLLM's own ``generate_block_hash_extra_keys`` gives for the
  token range of that chunk, encoded canonically (:func:`encode_extra_keys`);
- the chunk keys are kvfabric's prefix-chained keys (``crates/store/src/chunk.rs``) with each
  chunk's extra keys folded into the parent it chains from
  (``_native.chunk_keys_with_extras``; the derivation is in ``crates/python/src/keys.rs``).

So two requests get equal keys for chunk ``i`` exactly when their tokens up to the chunk's end
and every extra key up to it are equal, which is when vLLM's block hashes of the chunk's pages
are equal; and a request with no extra keys gets the keys any router computes from its tokens
(``kvfabric.chunk_keys(model, tokens)``). ``python/tests/test_vllm_keys.py`` checks both
against vLLM's own hasher.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from vllm.v1.core.kv_cache_utils import generate_block_hash_extra_keys

from .. import _native


def _enc(x, out: bytearray) -> None:
    if x is None:
        out += b"n"
    elif isinstance(x, bool):
        out += b"?" + (b"\x01" if x else b"\x00")
    elif isinstance(x, int):
        s = str(x).encode()
        out += b"i" + struct.pack("<I", len(s)) + s
    elif isinstance(x, str):
        b = x.encode("utf-8")
        out += b"s" + struct.pack("<I", len(b)) + b
    elif isinstance(x, (bytes, bytearray, memoryview)):
        b = bytes(x)
        out += b"b" + struct.pack("<I", len(b)) + b
    elif isinstance(x, (tuple, list)):
        out += b"t" + struct.pack("<I", len(x))
        for item in x:
            _enc(item, out)
    else:
        raise TypeError(
            f"extra key: expected None, bool, int, str, bytes or a tuple of them, "
            f"found {type(x).__name__}"
        )


def encode_extra_keys(extra_keys: Sequence | None) -> bytes | None:
    """A canonical byte encoding of one chunk's extra keys (None when it has none): a tag per
    value (``n`` None, ``?`` bool, ``i`` int as decimal, ``s`` UTF-8 string, ``b`` bytes, ``t``
    tuple), lengths and counts as u32 little-endian."""
    if not extra_keys:
        return None
    out = bytearray(b"kvfabric-vllm-extra-keys\x01")
    _enc(tuple(extra_keys), out)
    return bytes(out)


def chunk_extra_keys(request, num_chunks: int, block_tokens: int) -> list[bytes | None]:
    """Each chunk's encoded extra keys, from vLLM's ``generate_block_hash_extra_keys`` over the
    chunk's token range."""
    extras: list[bytes | None] = []
    mm_idx = 0
    for i in range(num_chunks):
        keys, mm_idx = generate_block_hash_extra_keys(
            request, i * block_tokens, (i + 1) * block_tokens, mm_idx
        )
        extras.append(encode_extra_keys(keys))
    return extras


def request_chunk_keys(
    request, model: str, block_tokens: int, num_chunks: int, namespace: str
) -> list[bytes]:
    """The chunk keys of a request's first ``num_chunks`` chunks (module docs)."""
    tokens = list(request.all_token_ids[: num_chunks * block_tokens])
    if len(tokens) < num_chunks * block_tokens:
        raise ValueError(
            f"request {request.request_id}: {num_chunks} chunks need "
            f"{num_chunks * block_tokens} tokens, found {len(tokens)}"
        )
    extras = chunk_extra_keys(request, num_chunks, block_tokens)
    return _native.chunk_keys_with_extras(model, tokens, extras, namespace)
