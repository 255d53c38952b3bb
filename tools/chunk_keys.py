#!/usr/bin/env python3
"""Reference implementation of kvfabric chunk keys (crates/store/src/chunk.rs), in Python.

  python3 tools/chunk_keys.py --generate > crates/store/tests/data/chunk_keys.json
  python3 tools/chunk_keys.py --check crates/store/tests/data/chunk_keys.json
  python3 tools/chunk_keys.py --check-native

The Rust test `crates/store/tests/chunk_keys.rs` checks the same file, so the two
implementations agree byte for byte. `--check-native` compares this reference with the
`kvfabric` package's native module (the store's own Rust code) for every preset in both
modes. Needs the `blake3` package (pip install blake3); `--check-native` needs `kvfabric`.
"""

import json
import struct
import sys

from blake3 import blake3

NAMESPACE_CONTEXT = "kvfabric 2026-11 namespace v1"
VERSION = 1
MODES = {"prefix": 0, "independent": 1}


def namespace_key(name: str) -> bytes:
    """The public key a namespace's chunk keys are keyed by: from the name alone, so any
    client computes chunk keys without the cluster's secret (the node files them in its
    directory under its secret-derived namespace key; block ids use that key too)."""
    return blake3(name.encode(), derive_key_context=NAMESPACE_CONTEXT).digest()


def chunk_key(ns_key: bytes, fingerprint: bytes, mode: str, parent: bytes, tokens) -> bytes:
    h = blake3(key=ns_key)
    h.update(b"KVFC")
    h.update(bytes([VERSION, MODES[mode]]))
    h.update(fingerprint)
    h.update(parent if mode == "prefix" else bytes(32))
    h.update(struct.pack("<I", len(tokens)))
    h.update(struct.pack(f"<{len(tokens)}I", *tokens))
    return h.digest()


def chunk_keys(namespace: str, fingerprint_hex: str, block_tokens: int, mode: str, tokens):
    ns = namespace_key(namespace)
    fp = bytes.fromhex(fingerprint_hex)
    parent = bytes(32)
    keys = []
    for i in range(len(tokens) // block_tokens):
        k = chunk_key(ns, fp, mode, parent, tokens[i * block_tokens : (i + 1) * block_tokens])
        keys.append(k.hex())
        parent = k
    return keys


# The deepseek-v3 preset's fingerprint (pinned in crates/store/src/geometry/fingerprint.rs).
V3 = ("deepseek-v3", "de4c002b68499870e08f4b56b6a329b7", 64)


def cases():
    doc = [(i * 7919 + 13) % 129280 for i in range(128)]
    pre_a = list(range(1, 65))
    pre_b = [129279 - i for i in range(64)]
    for namespace in ("default", "team-a"):
        for mode in ("prefix", "independent"):
            for label, tokens in (
                ("doc", doc),
                ("preamble-a+doc", pre_a + doc),
                ("preamble-b+doc", pre_b + doc),
                ("partial", doc[:100]),
                ("max-token-ids", [0xFFFFFFFF] * 64),
            ):
                yield namespace, mode, label, tokens


def generate():
    model, fp, block = V3
    vectors = []
    for namespace, mode, label, tokens in cases():
        vectors.append(
            {
                "label": label,
                "model": model,
                "fingerprint": fp,
                "block_tokens": block,
                "namespace": namespace,
                "mode": mode,
                "tokens": tokens,
                "keys": chunk_keys(namespace, fp, block, mode, tokens),
            }
        )
    return {"scheme": "kvfabric chunk keys v1 (crates/store/src/chunk.rs)", "vectors": vectors}


def check_native() -> int:
    import kvfabric

    bad = total = 0
    for m in kvfabric.models():
        tokens = [(i * 7919 + 13) % 129280 for i in range(3 * m.block_tokens + 5)]
        for mode in MODES:
            total += 1
            want = chunk_keys("team-a", m.fingerprint.hex(), m.block_tokens, mode, tokens)
            got = [k.hex() for k in kvfabric.chunk_keys(m.name, tokens, mode, "team-a")]
            if got != want:
                bad += 1
                print("mismatch:", m.name, mode, file=sys.stderr)
    print(f"chunk keys agree with the native module: {total - bad} of {total}")
    return 1 if bad else 0


def main(argv):
    if argv[1:] == ["--generate"]:
        json.dump(generate(), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if argv[1:] == ["--check-native"]:
        return check_native()
    if len(argv) == 3 and argv[1] == "--check":
        with open(argv[2]) as f:
            data = json.load(f)
        bad = 0
        for v in data["vectors"]:
            got = chunk_keys(
                v["namespace"], v["fingerprint"], v["block_tokens"], v["mode"], v["tokens"]
            )
            if got != v["keys"]:
                bad += 1
                print("mismatch:", v["label"], v["namespace"], v["mode"], file=sys.stderr)
        n = len(data["vectors"])
        print(f"chunk key vectors agree: {n - bad} of {n}")
        return 1 if bad else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
