//! Replays every committed fuzz input of the node's decoders (the corpora in
//! `fuzz/corpus/<target>` and the crashes kept in `fuzz/regressions/<target>`) through the
//! properties the fuzz targets check (`kvfabric_node::fuzzing`), on stable Rust. The ignored
//! `write_seeds` test writes the seed inputs the corpora grew from: request heads, event resume
//! requests and ZeroMQ replay requests as real clients send them (the Python client, vLLM's
//! ZeroMQ subscriber, a browser's `EventSource`).

use std::path::{Path, PathBuf};

use kvfabric_node::fuzzing;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn replay(target: &str, run: fn(&[u8])) {
    kvfabric_store::fuzzing::replay(&fuzz_dir(), target, run);
}

#[test]
fn fuzz_corpus_request_head() {
    replay("request_head", fuzzing::request_head);
}

#[test]
fn fuzz_corpus_event_resume() {
    replay("event_resume", fuzzing::event_resume);
}

#[test]
fn fuzz_corpus_zmq_request() {
    replay("zmq_request", fuzzing::zmq_request);
}

/// ZeroMQ frames as `fuzzing::zmq_request` reads them: a length byte before each.
fn frames(fs: &[&[u8]]) -> Vec<u8> {
    fs.iter()
        .flat_map(|f| std::iter::once(f.len() as u8).chain(f.iter().copied()))
        .collect()
}

fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let id = "ab".repeat(32);
    let key = "0f".repeat(32);
    let mut out = vec![
        (
            "request_head",
            "put",
            format!(
                "/v1/blocks/{id}\n\nkvfabric-tokens: 64\nkvfabric-chunk-key: {key}\n\
                 content-length: 4096\nauthorization: Bearer token-for-tenant-a"
            )
            .into_bytes(),
        ),
        (
            "request_head",
            "engine",
            format!(
                "/v1/blocks/{id}\nposition=128&variant=0\nkvfabric-tokens: 64\n\
                 kvfabric-position: 64\nkvfabric-chunk-key-independent: {key}\n\
                 kvfabric-engine: vllm-0.33.0\nkvfabric-engine-block-hashes: i:1,i:2,i:3,i:4\n\
                 kvfabric-engine-parent-hash: i:9\nkvfabric-engine-page-tokens: 16\n\
                 kvfabric-engine-lora-id: 3\nkvfabric-engine-lora-name: adapter\n\
                 kvfabric-engine-group-idx: 0\nkvfabric-engine-kv-cache-spec-kind: mla_attention"
            )
            .into_bytes(),
        ),
        (
            "event_resume",
            "since",
            b"\0\0\0\0\0\0\0\x06since=12&scope=cluster".to_vec(),
        ),
        (
            "event_resume",
            "last-event-id",
            b"\0\0\0\0\0\0\0\x06scope=node\n3:41".to_vec(),
        ),
        (
            "event_resume",
            "older-epoch",
            b"\0\0\0\0\0\0\0\x10\n2:7".to_vec(),
        ),
        (
            "zmq_request",
            "all",
            frames(&[b"peer", b"", &5u64.to_be_bytes()]),
        ),
    ];
    out.push((
        "zmq_request",
        "topic",
        frames(&[
            b"\0\x01\x02\x03\x04",
            b"",
            b"kv-events",
            &0u64.to_be_bytes(),
        ]),
    ));
    out
}

#[test]
#[ignore = "writes the seed corpus files"]
fn write_seeds() {
    for (target, name, bytes) in seeds() {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("create a corpus directory");
        std::fs::write(dir.join(format!("seed-{name}")), &bytes).expect("write a seed");
        let run: fn(&[u8]) = match target {
            "request_head" => fuzzing::request_head,
            "event_resume" => fuzzing::event_resume,
            _ => fuzzing::zmq_request,
        };
        run(&bytes);
    }
}
