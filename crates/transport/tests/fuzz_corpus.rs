//! Replays every committed input of the `frame_decode` fuzz target (the minimized corpus in
//! `fuzz/corpus/frame_decode` and the crashes kept in `fuzz/regressions/frame_decode`) through
//! the properties it checks (`fuzz/checks/frame_decode.rs`, included here), on stable Rust.
//! The ignored `write_seeds` test writes the seed inputs the corpus grew from: real headers
//! and lease descriptors made with the transport's own encoders.

use std::path::{Path, PathBuf};

use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::frame::{FrameHeader, FrameKind};
use kvfabric_transport::lease::LeaseDescriptor;

#[path = "../fuzz/checks/frame_decode.rs"]
mod frame_decode;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

#[test]
fn fuzz_corpus_frame_decode() {
    kvfabric_store::fuzzing::replay(&fuzz_dir(), "frame_decode", frame_decode::run);
}

#[test]
#[ignore = "writes seed inputs into fuzz/corpus (run once before fuzzing a new target)"]
fn write_seeds() {
    let (ns, id) = (NamespaceKey([0x11; 32]), BlockId([0x22; 32]));
    let max = (64u64 << 20).to_le_bytes();
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    for code in FrameKind::CODES {
        let kind = FrameKind::from_code(code).expect("a kind");
        let length = if kind.has_payload() { 48 } else { 0 };
        let header = FrameHeader {
            kind,
            id,
            namespace: ns,
            length,
        };
        seeds.push((format!("{kind:?}"), [&max[..], &header.encode()].concat()));
    }
    let lease = LeaseDescriptor {
        block_len: 4096,
        remote_addr: 0x7f00_0000_1000,
        rkey: vec![3; 40],
        worker_address: vec![9; 120],
    };
    seeds.push(("lease".into(), [&max[..], &lease.encode()].concat()));
    let dir = fuzz_dir().join("corpus").join("frame_decode");
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    for (name, bytes) in seeds {
        std::fs::write(dir.join(format!("seed-{name}")), &bytes).expect("write a seed");
        frame_decode::run(&bytes);
    }
}
