"""vLLM's MLA KV cache pages and kvfabric's layer-major blocks, mapped without reinterpretation.

vLLM keeps, per MLA layer, a cache of pages (its "blocks") of ``page_tokens`` rows, each row
one token's ``[c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)]`` in the cache dtype
(``[num_pages, 1, page_tokens, kv_lora_rank + qk_rope_head_dim]``, a ``[B, H, N, C]`` view with
``H == 1``). A kvfabric MLA block holds ``block_tokens`` (64) tokens of every layer: per layer
the 64 ``c_kv`` rows, then the 64 ``k_rope`` rows (``kvfabric.model(name).layers``). A block's
token ``t`` of layer ``l`` is row ``(s + t) % page_tokens`` of page
``page_ids[(s + t) // page_tokens]`` of that layer, ``s`` being the block's first token in the
request; its first ``kv_lora_rank`` values are the block's ``c_kv`` row ``t``, the rest its
``k_rope`` row ``t``. Values are copied as they are (same dtype, same bits): vLLM's ``k_pe`` is
stored as vLLM cached it, so a block is only ever loaded at the positions it was computed at
(the connector keys blocks by prefix-chained keys and never asks the node to rotate).

vLLM's default page of 16 tokens puts 4 pages in a block; a page of 64 (FlashMLA's) is one
block; a page of 128 holds 2 blocks. Any page size that divides or is a multiple of 64 works.

The latent does not depend on tensor parallelism: every TP rank's cache holds the same
``c_kv`` and ``k_pe`` for every token (MLA shares one latent across heads), so a block saved by
one TP size is loaded by any other.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from vllm.model_executor.models.utils import extract_layer_index

from ..models import Model

#: The torch dtype of each preset dtype a cache can hold as is.
TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


class LayoutError(ValueError):
    """The engine's cache does not have the layout the preset says."""


class MlaPages:
    """Every layer's MLA cache of one worker, with the preset's block layout."""

    def __init__(self, model: Model, kv_caches: dict[str, torch.Tensor], page_tokens: int):
        if model.kind != "mla":
            raise LayoutError(f"model {model.name}: expected an MLA preset, found {model.kind}")
        if not (model.block_tokens % page_tokens == 0 or page_tokens % model.block_tokens == 0):
            raise LayoutError(
                f"page size {page_tokens}: expected a divisor or a multiple of the "
                f"{model.block_tokens}-token block"
            )
        if len(kv_caches) != model.num_layers:
            raise LayoutError(
                f"model {model.name}: expected {model.num_layers} MLA layers, found "
                f"{len(kv_caches)} (pipeline parallelism, which splits a block's layers "
                "across workers, is not supported)"
            )
        self.model = model
        self.page_tokens = page_tokens
        self.rank = model.kv_lora_rank
        width = model.kv_lora_rank + model.rope_dim
        lay0 = model.layers[0]
        ckv, krope = lay0.region("c_kv"), lay0.region("k_rope")
        if ckv.dtype != krope.dtype or ckv.dtype not in TORCH_DTYPES:
            raise LayoutError(
                f"model {model.name}: c_kv is {ckv.dtype} and k_rope {krope.dtype}; the "
                "connector copies one cache dtype (bf16, f16 or f32) for both"
            )
        self.dtype = TORCH_DTYPES[ckv.dtype]
        ordered = sorted(kv_caches.items(), key=lambda kv: extract_layer_index(kv[0]))
        self.layer_names = [name for name, _ in ordered]
        self.caches: list[torch.Tensor] = []
        for name, cache in ordered:
            t = cache
            if t.ndim == 4:
                if t.shape[1] != 1:
                    raise LayoutError(
                        f"{name}: expected one MLA head ([pages, 1, tokens, width]), "
                        f"found shape {tuple(t.shape)}"
                    )
                t = t[:, 0]
            if t.ndim != 3 or t.shape[1] != page_tokens or t.shape[2] != width:
                raise LayoutError(
                    f"{name}: expected [pages, {page_tokens}, {width}] "
                    f"(kv_lora_rank {model.kv_lora_rank} + rope {model.rope_dim}), "
                    f"found shape {tuple(t.shape)}"
                )
            if t.dtype != self.dtype:
                raise LayoutError(
                    f"{name}: expected cache dtype {self.dtype} ({model.name}), found {t.dtype}"
                )
            self.caches.append(t)
        self.device = self.caches[0].device

    def new_block(self) -> torch.Tensor:
        """A host buffer for one block's payload (pinned when the cache is on a GPU)."""
        pin = self.device.type == "cuda"
        return torch.empty(self.model.block_bytes, dtype=torch.uint8, pin_memory=pin)

    def _regions(self, block: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        lay = self.model.layers[layer]
        out = []
        for name in ("c_kv", "k_rope"):
            r = lay.region(name)
            out.append(block[r.offset : r.offset + r.nbytes].view(self.dtype).view(r.rows, r.dims))
        return out[0], out[1]

    def _index(self, page_ids: Sequence[int], first: int, count: int, first_page: int = 0):
        tokens = torch.arange(first, first + count)
        pos = tokens // self.page_tokens - first_page
        pages = torch.as_tensor(list(page_ids), dtype=torch.long)[pos]
        return pages.to(self.device), (tokens % self.page_tokens).to(self.device)

    def pages_of(self, page_ids: Sequence[int], first: int, end: int) -> list[int]:
        """The page ids holding tokens ``[first, end)``."""
        if end <= first:
            return []
        return list(page_ids[first // self.page_tokens : (end - 1) // self.page_tokens + 1])

    def gather(
        self, block: torch.Tensor, page_ids: Sequence[int], chunk: int, first_page: int = 0
    ) -> None:
        """Copies chunk ``chunk``'s tokens of every layer from the pages into ``block``
        (``page_ids`` starts with the request's page ``first_page``)."""
        n = self.model.block_tokens
        pages, rows = self._index(page_ids, chunk * n, n, first_page)
        for layer, cache in enumerate(self.caches):
            ckv, krope = self._regions(block, layer)
            src = cache[pages, rows]
            ckv.copy_(src[:, : self.rank])
            krope.copy_(src[:, self.rank :])

    def scatter(
        self, block: torch.Tensor, page_ids: Sequence[int], chunk: int, first: int, end: int
    ) -> None:
        """Copies the block's tokens ``[first, end)`` (request positions, inside chunk
        ``chunk``) of every layer into the pages."""
        n = self.model.block_tokens
        lo, hi = first - chunk * n, end - chunk * n
        if not 0 <= lo < hi <= n:
            raise ValueError(f"tokens [{first}, {end}) are not inside chunk {chunk}")
        pages, rows = self._index(page_ids, first, hi - lo)
        for layer, cache in enumerate(self.caches):
            ckv, krope = self._regions(block, layer)
            cache[pages, rows, : self.rank] = ckv[lo:hi].to(self.device, non_blocking=True)
            cache[pages, rows, self.rank :] = krope[lo:hi].to(self.device, non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
