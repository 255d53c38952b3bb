"""Byte views of a caller's memory, for reads and writes without a copy in Python.

Anything with the buffer protocol (``bytes``, ``bytearray``, ``memoryview``, numpy arrays)
is viewed as unsigned bytes; a CPU torch tensor (which has no buffer protocol) is viewed
through ``tensor.view(torch.uint8).numpy()``, which shares its storage. torch is never imported
here: a tensor's own module is used, so importing kvfabric does not import torch.
"""

from __future__ import annotations

import sys


def _is_torch_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def byte_view(obj: object, writable: bool = False) -> memoryview:
    """A C-contiguous ``'B'`` memoryview of ``obj``'s memory (no copy).

    Raises ``TypeError`` for an object that exposes no memory, a non-contiguous one, a tensor
    off the CPU, or (``writable``) read-only memory.
    """
    if _is_torch_tensor(obj):
        torch = sys.modules["torch"]
        if obj.device.type != "cpu":
            raise TypeError(f"expected a CPU tensor, found one on {obj.device}")
        if not obj.is_contiguous():
            raise TypeError("expected a contiguous tensor, found a strided one")
        flat = obj.detach().reshape(-1).view(torch.uint8)
        obj = flat.numpy()
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"expected a buffer (bytes, bytearray, numpy array, CPU torch tensor), "
            f"found {type(obj).__name__}"
        ) from None
    if not view.c_contiguous:
        raise TypeError("expected C-contiguous memory, found a strided buffer")
    if writable and view.readonly:
        raise TypeError(f"expected writable memory, found a read-only {type(obj).__name__}")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view
