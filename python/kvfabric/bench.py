"""The client benchmark: ``python -m kvfabric.bench``.

Python's ``kvfabric.Client`` against the node's HTTP API driven from Rust alone
(``_native.node_http_put_get``: the same requests, no Python between them), on the same node
with the same 4.5 MB DeepSeek-V3 blocks, in alternating rounds; then the vLLM connector's save
and load time per 64-token block (``--connector-blocks``, CPU caches, vLLM's own objects).

Puts are of blocks the node already holds (each block is put once before the rounds): the
node receives every byte, hashes it and compares it with the held copy (dedup ``shared``), the
same work on both sides. Gets read into one reused buffer. Prints a GB/s table (the median
round), ``ratio client_over_node_http`` (put + get, Python over Rust; target ≥ 0.9) and the
connector's milliseconds per block.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import _native
from .client import Client
from .models import model as preset

MODEL = "deepseek-v3"


def _cluster_up(binary: str, root: Path) -> str:
    out = subprocess.run(
        [binary, "cluster", "up", "--nodes", "1", "--dir", str(root), "--host-bytes", "2 GiB"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"kvfabric bench: cluster up failed: {out.stderr.strip()}")
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "n1":
            return parts[1]
    raise SystemExit(f"kvfabric bench: no node address in {out.stdout!r}")


def _rounds(url: str, blocks, rounds: int):
    m = preset(MODEL)
    client = Client(url, retries=0, timeout_s=120)
    for b in blocks:
        client.put(b, MODEL)
    out = np.empty(m.block_bytes, dtype=np.uint8)
    rust, py = [], []

    def python_round():
        t = time.perf_counter()
        ids = [client.put(b, MODEL).block for b in blocks]
        put = time.perf_counter() - t
        t = time.perf_counter()
        for i in ids:
            client.get_into(i, out, verify=False)
        py.append((put, time.perf_counter() - t))

    for r in range(rounds):
        # ABBA: neither side always runs first.
        if r % 2:
            python_round()
        rust.extend(_native.node_http_put_get(url, MODEL, m.block_tokens, blocks, 1))
        if not r % 2:
            python_round()
    return rust, py


def _connector(url: str, chunks: int) -> tuple[float, float]:
    import torch

    from .vllm.harness import Engine

    b = preset(MODEL).block_tokens
    prompt = torch.randint(0, 129_000, (chunks * b + 1,)).tolist()
    eng = Engine(url, 16, num_pages=2 * (chunks * b // 16 + 2))
    try:
        r = eng.request("bench-save", prompt)
        blocks = eng.allocate(r)
        eng.scheduler.update_state_after_alloc(r, blocks, 0)
        eng.write_request_kv(r, blocks, 1)
        t = time.perf_counter()
        eng.step(new=[(r, blocks, r.num_tokens)])
        eng.scheduler.request_finished(r, blocks.get_block_ids()[0])
        eng.wait("finished_sending", r.request_id)
        save = time.perf_counter() - t
        q = eng.request("bench-load", prompt)
        n, is_async = eng.scheduler.get_num_new_matched_tokens(q, 0)
        if n != chunks * b or is_async:
            raise SystemExit(f"kvfabric bench: expected {chunks} local hits, found {n // b}")
        qblocks = eng.allocate(q)
        eng.scheduler.update_state_after_alloc(q, qblocks, n)
        t = time.perf_counter()
        eng.step(new=[(q, qblocks, q.num_tokens - n)])
        load = time.perf_counter() - t
        if not torch.equal(eng.token_rows(0, qblocks, 0, n), eng.token_rows(0, blocks, 0, n)):
            raise SystemExit("kvfabric bench: the loaded latents differ from the saved ones")
        return save / chunks, load / chunks
    finally:
        eng.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kvfabric.bench", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--url", help="an existing node (default: start a 1-node cluster)")
    ap.add_argument("--kvfabric", default="target/release/kvfabric", help="the node binary")
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--connector-blocks",
        type=int,
        default=16,
        help="64-token blocks the connector saves and loads (0: skip)",
    )
    a = ap.parse_args(argv)
    if a.blocks < 1 or a.rounds < 1 or a.connector_blocks < 0:
        ap.error("--blocks and --rounds must be at least 1, --connector-blocks at least 0")
    m = preset(MODEL)
    rng = np.random.default_rng(7)
    blocks = [rng.integers(0, 256, m.block_bytes, dtype=np.uint8) for _ in range(a.blocks)]
    with tempfile.TemporaryDirectory(prefix="kvfabric-bench-") as tmp:
        url = a.url or _cluster_up(a.kvfabric, Path(tmp))
        try:
            rust, py = _rounds(url, blocks, a.rounds)
            per_block = _connector(url, a.connector_blocks) if a.connector_blocks else None
        finally:
            if not a.url:
                subprocess.run(
                    [a.kvfabric, "cluster", "down", "--dir", tmp],
                    capture_output=True,
                    timeout=120,
                    check=False,
                )
    gb = a.blocks * m.block_bytes / 1e9

    def med(rows, i):
        return statistics.median(r[i] if i < 2 else r[0] + r[1] for r in rows)

    print(
        f"kvfabric bench client: {a.blocks} x {m.block_bytes} B {MODEL} blocks, "
        f"{a.rounds} rounds, median round"
    )
    print(f"{'path':<28} {'put GB/s':>9} {'get GB/s':>9} {'put+get GB/s':>13}")
    for name, rows in (("(r) node HTTP from Rust", rust), ("(p) kvfabric.Client", py)):
        print(
            f"{name:<28} {gb / med(rows, 0):>9.2f} {gb / med(rows, 1):>9.2f} "
            f"{2 * gb / med(rows, 2):>13.2f}"
        )
    if per_block:
        print(
            f"connector save {per_block[0] * 1e3:.1f} ms/block, "
            f"load {per_block[1] * 1e3:.1f} ms/block ({a.connector_blocks} blocks)"
        )
    print(f"ratio client_put_over_node_http {med(rust, 0) / med(py, 0):.3f}")
    print(f"ratio client_get_over_node_http {med(rust, 1) / med(py, 1):.3f}")
    print(f"ratio client_over_node_http {med(rust, 2) / med(py, 2):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
