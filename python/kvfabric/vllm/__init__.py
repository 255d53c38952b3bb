"""kvfabric's vLLM KV connector (imports vLLM and torch; ``import kvfabric`` does not).

``--kv-transfer-config '{"kv_connector": "KvFabricConnector", "kv_connector_module_path":
"kvfabric.vllm", "kv_role": "kv_both", "kv_connector_extra_config": {"url": URL}}'``
"""

from .connector import KvFabricConnector
from .metadata import KvFabricConnectorMetadata, LoadSpec, SaveSpec

__all__ = ["KvFabricConnector", "KvFabricConnectorMetadata", "LoadSpec", "SaveSpec"]
