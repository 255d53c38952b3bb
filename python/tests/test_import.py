"""``import kvfabric`` imports neither torch nor vllm; ``kvfabric.vllm`` imports vllm."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "vllm"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Block())
import kvfabric
assert "torch" not in sys.modules and "vllm" not in sys.modules
keys = kvfabric.chunk_keys("deepseek-v3", list(range(128)))
assert len(keys) == 2 and len(kvfabric.models()) > 5
kvfabric.Client("http://127.0.0.1:9")
try:
    import kvfabric.vllm
except ImportError as e:
    print("vllm blocked:", e)
else:
    raise AssertionError("kvfabric.vllm imported without vllm")
print("ok")
"""


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def test_import_kvfabric_works_with_torch_and_vllm_blocked():
    out = run(BLOCKED)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok") and "vllm blocked" in out.stdout


def test_kvfabric_vllm_imports_vllm():
    out = run("import sys, kvfabric.vllm; print('vllm' in sys.modules, 'torch' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["True", "True"]
