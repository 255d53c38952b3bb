"""The connector's settings: ``kv_connector_extra_config`` of ``--kv-transfer-config``.

- ``url`` (required): the kvfabric node this engine uses, ``http://HOST:PORT``;
- ``token``: bearer token (``KVFABRIC_TOKEN`` is also read);
- ``namespace``: where blocks are put and verified; ``default`` without a token, required
  with one;
- ``model``: the kvfabric preset (``kvfabric.models()``); inferred from the model's layers,
  ``kv_lora_rank`` and ``qk_rope_head_dim`` when exactly one preset matches;
- ``timeout_s`` (30): bound on each HTTP call; ``retries`` (3): retries of a 503 or a failed
  connection; ``io_threads`` (4): a worker's concurrent block transfers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..models import model as preset
from ..models import models as all_models

#: Most concurrent transfers a worker may be configured with.
IO_THREADS_MAX = 64


@dataclass(frozen=True)
class ConnectorConfig:
    """Parsed and checked settings."""

    url: str
    token: str | None
    namespace: str
    model: str
    timeout_s: float
    retries: int
    io_threads: int

    def client(self):
        """A client of the configured node."""
        from ..client import Client

        return Client(
            self.url,
            self.token,
            namespace=self.namespace,
            timeout_s=self.timeout_s,
            retries=self.retries,
        )


def _infer_model(vllm_config) -> str:
    mc = getattr(vllm_config, "model_config", None)
    hf = getattr(mc, "hf_text_config", None) or getattr(mc, "hf_config", None)
    if hf is None:
        raise ValueError(
            "kv_connector_extra_config.model: required (no model config to infer from)"
        )
    want = (
        getattr(hf, "num_hidden_layers", None),
        getattr(hf, "kv_lora_rank", None),
        getattr(hf, "qk_rope_head_dim", None),
    )
    found = [
        m.name
        for m in all_models()
        if m.kind == "mla" and (m.num_layers, m.kv_lora_rank, m.rope_dim) == want
    ]
    if len(found) != 1:
        raise ValueError(
            f"kv_connector_extra_config.model: cannot infer the preset from layers, "
            f"kv_lora_rank, qk_rope_head_dim = {want} (matching: {found or 'none'}); name one "
            f"of {', '.join(m.name for m in all_models() if m.kind == 'mla')}"
        )
    return found[0]


def parse(vllm_config) -> ConnectorConfig:
    """The settings of ``vllm_config.kv_transfer_config``; a ValueError names a bad key."""
    extra = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
    url = extra.get("url")
    if not isinstance(url, str) or not url.startswith("http://"):
        raise ValueError(f"kv_connector_extra_config.url: expected an http:// URL, found {url!r}")
    token = extra.get("token") or os.environ.get("KVFABRIC_TOKEN")
    namespace = extra.get("namespace") or (None if token else "default")
    if namespace is None:
        raise ValueError(
            "kv_connector_extra_config.namespace: required with a token (blocks are verified "
            "in the namespace they are put in)"
        )
    model = extra.get("model") or _infer_model(vllm_config)
    m = preset(model)
    if m.kind != "mla":
        raise ValueError(
            f"kv_connector_extra_config.model: expected an MLA preset, found {model} ({m.kind})"
        )
    io_threads = int(extra.get("io_threads", 4))
    if not 1 <= io_threads <= IO_THREADS_MAX:
        raise ValueError(
            f"kv_connector_extra_config.io_threads: expected 1 to "
            f"{IO_THREADS_MAX}, found {io_threads}"
        )
    return ConnectorConfig(
        url=url,
        token=token,
        namespace=namespace,
        model=model,
        timeout_s=float(extra.get("timeout_s", 30.0)),
        retries=int(extra.get("retries", 3)),
        io_threads=io_threads,
    )
