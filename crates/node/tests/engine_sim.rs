//! `kvfabric engine-sim` against a real node: a repeated prompt recomputes nothing, a document
//! chunk behind a different preamble is a hit by position-independent key (and a miss for a
//! prefix-only engine), every byte read is the engine's, and bad input is a 400 JSON error
//! counted in the engine's metrics.

mod common;
mod router_harness;

use common::{Options, TestNode};
use router_harness::{chunks, Server};

const MODEL: &str = "minicpm3-4b";
const BT: usize = 64;

fn engine(node: &TestNode) -> Server {
    Server::start(&[
        "engine-sim",
        "--node",
        &node.url,
        "--model",
        MODEL,
        "--prefill-tokens-per-s",
        "1000000",
    ])
}

#[test]
fn engine_sim_reuses_blocks_by_prefix_and_by_position_independent_key() {
    let node = common::kvfabric().node(Options {
        tenants: false,
        ..Options::default()
    });
    let e = engine(&node);
    let block_bytes = common::builtin(MODEL).block_layout().payload_len as f64;

    let system = chunks(1, 1, BT);
    let doc = chunks(2, 2, BT);
    let prompt = |preamble: u32| {
        let mut t = system.clone();
        t.extend(chunks(preamble, 1, BT));
        t.extend(&doc);
        t
    };
    let a = prompt(10);
    let first = e.generate(&a, None);
    assert_eq!(first["chunks"], 4, "{first}");
    assert_eq!(first["recomputed_tokens"], 4 * BT as u64, "{first}");
    assert_eq!(first["hits_local"], 0, "{first}");
    assert_eq!(first["request_id"], "t", "{first}");
    assert_eq!(first["mode"], "any", "{first}");

    let again = e.generate(&a, None);
    assert_eq!(again["recomputed_tokens"], 0, "{again}");
    assert_eq!(again["hits_local"], 4, "{again}");
    assert_eq!(again["mismatches"], 0, "{again}");
    assert_eq!(again["bytes_fetched"], 0, "{again}");

    // The same document behind another preamble: the system chunk by prefix key, the two
    // document chunks by position-independent key.
    let b = prompt(11);
    let moved = e.generate(&b, None);
    assert_eq!(moved["hits_local"], 3, "{moved}");
    assert_eq!(moved["recomputed_tokens"], BT as u64, "{moved}");
    assert_eq!(moved["mismatches"], 0, "{moved}");

    // A prefix-only engine finds the system chunk and nothing behind the new preamble.
    let c = prompt(12);
    let prefix = e.generate(&c, Some("prefix"));
    assert_eq!(prefix["mode"], "prefix", "{prefix}");
    assert_eq!(prefix["hits_local"], 1, "{prefix}");
    assert_eq!(prefix["recomputed_tokens"], 3 * BT as u64, "{prefix}");

    // A partial tail is prefilled, not stored.
    let mut d = system.clone();
    d.extend([7, 8, 9]);
    let tail = e.generate(&d, None);
    assert_eq!(tail["chunks"], 1, "{tail}");
    assert_eq!(tail["hits_local"], 1, "{tail}");
    assert_eq!(tail["recomputed_tokens"], 3, "{tail}");

    assert_eq!(e.get("/v1/load").json()["in_flight"], 0);
    assert_eq!(e.metric("kvfabric_engine_served_total"), 5.0);
    assert_eq!(
        e.metric("kvfabric_engine_recomputed_tokens_total"),
        (4 + 1 + 3) as f64 * BT as f64 + 3.0
    );
    assert_eq!(e.metric("kvfabric_engine_hits_local_total"), 9.0);
    assert!(block_bytes > 0.0);
    assert_eq!(e.get("/healthz").status, 200);
}

#[test]
fn engine_sim_refuses_bad_input_with_json_errors() {
    let node = common::kvfabric().node(Options {
        tenants: false,
        ..Options::default()
    });
    let e = engine(&node);
    e.post_raw("/v1/generate", b"not json")
        .assert_error(400, "invalid_json");
    e.post_raw("/v1/generate", br#"{"tokens": [1, -2]}"#)
        .assert_error(400, "invalid_tokens");
    e.post_raw("/v1/generate", br#"{"tokens": []}"#)
        .assert_error(400, "invalid_tokens");
    e.post_raw("/v1/generate", br#"{"tokens": [1], "mode": "all"}"#)
        .assert_error(400, "invalid_mode");
    e.get("/v1/nothing").assert_error(404, "route_not_found");
    assert_eq!(e.metric("kvfabric_engine_rejected_total"), 4.0);
    // Still serving.
    let ok = e.generate(&chunks(3, 1, BT), None);
    assert_eq!(ok["recomputed_tokens"], BT as u64, "{ok}");
}
