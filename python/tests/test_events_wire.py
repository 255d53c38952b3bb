"""kvfabric's ZeroMQ KV events decoded by vLLM's own classes (``vllm.distributed.kv_events``
of the pinned vLLM 0.33.0: ``KVEventBatch``, ``BlockStored``, ``BlockRemoved``,
``AllBlocksCleared``), from a real node's PUB and replay sockets: every kind kvfabric emits,
tier moves, removals, and a restart's new epoch (``AllBlocksCleared`` first, then the recovered
blocks under the same hashes and token ids)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request

import msgspec
import pytest
import zmq
from vllm.distributed import kv_events

import kvfabric
from kvfabric import EngineBlock

from conftest import Cluster, kvfabric_bin

MODEL = "deepseek-v2-lite"
#: Bound on one socket read (a loaded 2-core machine is slow).
RECV_TIMEOUT_MS = 30_000


def endpoint(c: Cluster, node: int, what: str) -> str:
    """The endpoint node ``node`` logged for one of its ZeroMQ sockets (the latest start's)."""
    deadline = time.monotonic() + RECV_TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        text = re.sub(r"\x1b\[[0-9;]*m", "", (c.dir / f"node{node}.log").read_text())
        found = [ln for ln in text.splitlines() if what in ln]
        if found:
            m = re.search(r"endpoint=(tcp://[0-9.]+:[0-9]+)", found[-1])
            assert m, found[-1]
            return m.group(1)
        time.sleep(0.05)
    raise AssertionError(f"no {what!r} in node{node}.log")


def replay(ep: str, start: int = 0) -> list[tuple[int, bytes]]:
    """vLLM's replay protocol: a DEALER sends ``["", start_seq]``; each answer is
    ``["", topic, seq, payload]``, then ``["", "", -1, ""]``."""
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
    s.connect(ep)
    try:
        s.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        while True:
            frames = s.recv_multipart()
            assert len(frames) == 4 and frames[0] == b"", frames
            seq = int.from_bytes(frames[2], "big", signed=True)
            if seq == -1:
                return out
            assert frames[1] == b"kvfabric.n1"
            out.append((seq, frames[3]))
    finally:
        s.close(linger=0)


DECODER = msgspec.msgpack.Decoder(type=kv_events.KVEventBatch)


def decode_all(batches):
    """Every batch through vLLM's decoder (``msgspec`` with vLLM's struct types)."""
    return [(seq, DECODER.decode(payload)) for seq, payload in batches]


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, waiting for its parent, does not)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def restart(c: Cluster, node: int) -> None:
    """SIGKILL the node and start it again on its config (its disk tier survives)."""
    pid_file = c.dir / f"node{node}.pid"
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while alive(pid):  # its ports and data dir are free once it is gone
        assert time.monotonic() < deadline, f"the killed node (pid {pid}) never went away"
        time.sleep(0.05)
    log = open(c.dir / f"node{node}.log", "ab")
    p = subprocess.Popen(
        [str(kvfabric_bin()), "node", "--config", str(c.dir / f"node{node}.toml")],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    pid_file.write_text(f"{p.pid}\n")
    deadline = time.monotonic() + 120
    while not ready(c.url(node)):
        if p.poll() is not None:
            tail = (c.dir / f"node{node}.log").read_text()[-2000:]
            raise AssertionError(f"the restarted node exited ({p.returncode}):\n{tail}")
        assert time.monotonic() < deadline, "the restarted node never became ready"
        time.sleep(0.2)


@pytest.fixture
def node(tmp_path):
    """One node with both ZeroMQ sockets and a host tier of two blocks (more demote to disk)."""
    m = kvfabric.model(MODEL)
    c = Cluster(
        tmp_path,
        1,
        "--host-bytes",
        str(2 * (m.block_bytes + 64)),
        "--events-set",
        'zmq_pub="tcp://127.0.0.1:0"',
        "--events-set",
        'zmq_replay="tcp://127.0.0.1:0"',
    )
    yield c
    c.down()


def block(seed: int) -> bytes:
    n = kvfabric.model(MODEL).block_bytes
    return bytes((i * 7 + seed) & 0xFF for i in range(256)) * (n // 256) + bytes(n % 256)


def low64(b: bytes) -> int:
    """vLLM's ``maybe_convert_block_hash``: the low 64 bits, big-endian."""
    return int.from_bytes(b, "big") & ((1 << 64) - 1)


def test_vllm_decodes_every_event_kind_and_a_restart_epoch(node):
    c = kvfabric.Client(node.url(1))
    ep_pub = endpoint(node, 1, "ZeroMQ publisher bound")
    ep_replay = endpoint(node, 1, "ZeroMQ replay bound")
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
    sub.connect(ep_pub)
    time.sleep(1.0)  # a PUB drops what it sends before the subscription arrives

    tokens = list(range(5000, 5064))
    page_hashes = [bytes([i]) * 32 for i in range(1, 5)]
    engine = EngineBlock(
        "vllm/0.33.0",
        page_hashes,
        b"\x09" * 32,
        16,
        tokens,
        lora_id=3,
        lora_name="adapter",
    )
    with_engine = c.put(block(1), MODEL, engine=engine).block
    int_engine = EngineBlock("vllm/0.33.0", [2**64 - 1], 77, 64, tokens[::-1])
    with_ints = c.put(block(2), MODEL, engine=int_engine).block
    plain = c.put(block(3), MODEL).block  # host holds two: the first block demotes to disk
    c.delete(with_ints)

    batches = decode_all(replay(ep_replay))
    assert [s for s, _ in batches] == list(range(len(batches))), "gap-free from 0"
    # Live, on the PUB socket: [topic, seq, payload], decoded by vLLM's decoder, the same
    # batches as the replay's (up to the last one, at least that one heard live).
    live = {}
    while batches[-1][0] not in live:
        topic, seq, payload = sub.recv_multipart()
        assert topic == b"kvfabric.n1"
        live[int.from_bytes(seq, "big")] = DECODER.decode(payload)
    sub.close(linger=0)
    for seq, b in live.items():
        assert batches[seq] == (seq, b)
    assert all(b.data_parallel_rank == 0 and b.ts > 1.6e9 for _, b in batches)
    events = [e for _, b in batches for e in b.events]
    assert isinstance(events[0], kv_events.AllBlocksCleared)

    stored = [e for e in events if isinstance(e, kv_events.BlockStored)]
    removed = [e for e in events if isinstance(e, kv_events.BlockRemoved)]
    first = stored[0]
    assert first.block_hashes == [low64(h) for h in page_hashes]
    assert first.parent_block_hash == low64(b"\x09" * 32)
    assert first.token_ids == tokens and first.block_size == 16
    assert (first.lora_id, first.lora_name) == (3, "adapter")
    assert (first.medium, first.locality, first.group_idx) == ("CPU", "LOCAL", 0)
    assert first.kv_cache_spec_kind == "mla_attention"
    ints = stored[1]
    assert ints.block_hashes == [2**64 - 1] and ints.parent_block_hash == 77
    assert ints.block_size == 64 and ints.token_ids == tokens[::-1]
    # A block put without an engine identity: one hash from its id, its token count.
    fallback = low64(bytes.fromhex(plain))
    plain_stored = [e for e in stored if e.block_hashes == [fallback]]
    assert len(plain_stored) == 1
    assert plain_stored[0].token_ids == [] and plain_stored[0].block_size == 64
    assert plain_stored[0].parent_block_hash is None and plain_stored[0].lora_name is None
    # The demotion: removed from CPU, stored in STORAGE under the same hashes and tokens.
    moved = [e for e in removed if e.medium == "CPU" and e.block_hashes == first.block_hashes]
    assert len(moved) == 1
    on_disk = [e for e in stored if e.medium == "STORAGE"]
    assert [e.block_hashes for e in on_disk] == [first.block_hashes]
    assert on_disk[0].token_ids == tokens
    # The delete: a removal under the hashes it was stored under.
    assert removed[-1].block_hashes == [2**64 - 1] and removed[-1].medium == "CPU"
    assert with_engine != with_ints

    # A restart: a new epoch from seq 0, AllBlocksCleared, then what the disk kept, published
    # under the engine identity it was put with.
    restart(node, 1)
    after = decode_all(replay(endpoint(node, 1, "ZeroMQ replay bound")))
    seq0, batch0 = after[0]
    assert seq0 == 0
    assert isinstance(batch0.events[0], kv_events.AllBlocksCleared)
    recovered = [e for e in batch0.events[1:] if isinstance(e, kv_events.BlockStored)]
    assert [e.block_hashes for e in recovered] == [first.block_hashes]
    assert recovered[0].token_ids == tokens and recovered[0].medium == "STORAGE"
    assert recovered[0].block_size == 16 and recovered[0].lora_name == "adapter"
