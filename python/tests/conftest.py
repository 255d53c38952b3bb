"""Fixtures: real kvfabric node processes (``kvfabric cluster up``), and a scripted HTTP server
for the client behaviours a healthy node never shows (503 bursts, stalls)."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Bound on `cluster up` (readiness of every node) and `cluster down`.
CLUSTER_TIMEOUT_S = 180


def kvfabric_bin() -> Path:
    """The node binary: ``KVFABRIC_BIN``, else ``target/debug/kvfabric`` of the checkout."""
    path = Path(os.environ.get("KVFABRIC_BIN") or REPO / "target" / "debug" / "kvfabric")
    if not path.is_file():
        pytest.fail(
            f"no kvfabric binary at {path}: run `cargo build -p kvfabric-node` or set KVFABRIC_BIN"
        )
    return path


#: Bound on a node's replica catching up with puts acknowledged through another node.
VISIBLE_TIMEOUT_S = 60


def visible(url: str, keys, owners: int = 1):
    """Node ``url``'s lookup of ``keys`` once every key names a block with at least ``owners``
    live owners. A plain lookup reads the node's own replica of the directory, which may trail
    a put acknowledged through another node by a moment (docs/API.md, ``consistency=local``)."""
    import kvfabric

    keys = list(keys)
    client = kvfabric.Client(url)
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    while True:
        found = client.lookup(keys)
        if all(f.block and len(f.owners) >= owners for f in found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} never resolved every key to {owners}+ owners: {found}")
        time.sleep(0.02)


class Cluster:
    """A local cluster started by ``kvfabric cluster up`` in ``dir``."""

    def __init__(self, dir: Path, nodes: int, *args: str):
        self.dir = dir
        out = subprocess.run(
            [
                str(kvfabric_bin()),
                "cluster",
                "up",
                "--nodes",
                str(nodes),
                "--dir",
                str(dir),
                "--timeout-s",
                str(CLUSTER_TIMEOUT_S),
                *args,
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=CLUSTER_TIMEOUT_S + 30,
        )
        if out.returncode != 0:
            raise RuntimeError(f"kvfabric cluster up failed: {out.stderr}{out.stdout}")
        self.urls: dict[int, str] = {}
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].startswith("n") and parts[1].startswith("http://"):
                self.urls[int(parts[0][1:])] = parts[1]
        assert len(self.urls) == nodes, out.stdout

    def url(self, node: int) -> str:
        return self.urls[node]

    def key(self) -> bytes:
        """The open namespace's key on this cluster (derived from its secret), as node 1
        lists it."""
        import kvfabric

        return kvfabric.Client(self.url(1)).namespace_keys()[0]

    def disk_dir(self, node: int) -> Path:
        """Where node ``node`` keeps its disk tier's segments."""
        return self.dir / f"node{node}" / "disk"

    def down(self) -> None:
        subprocess.run(
            [str(kvfabric_bin()), "cluster", "down", "--dir", str(self.dir)],
            check=False,
            capture_output=True,
            text=True,
            timeout=CLUSTER_TIMEOUT_S,
        )


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Three nodes, replication 2, a host tier of 64 MiB (14 DeepSeek-V3 blocks; a put reserves
    host space, so concurrent puts need room for each)."""
    c = Cluster(tmp_path_factory.mktemp("cluster"), 3, "--host-bytes", "64 MiB")
    yield c
    c.down()


class Script(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next ``(status, body, delay_s)`` of ``server.script``."""

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        status, body, delay = self.server.script.pop(0) if self.server.script else (500, b"", 0)
        if delay:
            threading.Event().wait(delay)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    """A local HTTP server answering from a script (a list the test fills)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Script)
    server.script, server.seen = [], []
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()
