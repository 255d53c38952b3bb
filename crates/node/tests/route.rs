//! `POST /v1/route` on a standalone node (a real process on loopback): blocks put with both a
//! prefix and a position-independent chunk key (`kvfabric-chunk-key-independent`, and the
//! CLI's `--chunk-key-independent`) are found by either; the answer counts prefix and
//! independent hits separately, infers the model from a held block, never counts another
//! tenant's blocks (the same answer as for keys nobody put), and refuses bad input with typed
//! 400s and a counter.

mod common;

use common::{payload, tiny, Options, TestNode, TOKEN_A, TOKEN_B};
use kvfabric_store::{chunk_keys, ChunkMode, NamespaceKey};
use serde_json::{json, Value};

/// Document `doc` (two chunks) behind preamble `preamble` (one chunk): the prefix and the
/// independent keys of its three chunks in tenant `a`'s namespace.
fn keys(preamble: u32, doc: u32) -> (Vec<String>, Vec<String>) {
    let g = tiny();
    let ns = NamespaceKey::derive("a");
    let n = g.block_tokens();
    // Chunk 0 is the preamble; chunks 1 and 2 are the document, the same wherever it sits.
    let mut tokens: Vec<u32> = (0..n).map(|t| preamble * 1000 + t).collect();
    tokens.extend((0..2 * n).map(|t| 500_000 * doc + t));
    let hex = |mode| {
        chunk_keys(&ns, &g, mode, &tokens)
            .iter()
            .map(|k| k.to_hex())
            .collect::<Vec<_>>()
    };
    (hex(ChunkMode::Prefix), hex(ChunkMode::Independent))
}

fn route(node: &TestNode, token: &str, body: &Value) -> common::Reply {
    node.post(Some(token), "/v1/route", body.to_string().as_bytes())
}

fn only_node(v: &Value) -> &Value {
    let nodes = v["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 1, "a standalone node ranks itself: {v}");
    &nodes[0]
}

#[test]
fn a_standalone_node_scores_prefix_and_independent_hits_per_tenant() {
    let node = common::kvfabric().node(Options {
        limits: common::LimitsSection {
            max_lookup_keys: Some(8),
            ..Default::default()
        },
        ..Options::default()
    });
    let g = tiny();
    let (p1, i1) = keys(1, 1);
    let (p2, i2) = keys(2, 1);
    assert_ne!(p1[1], p2[1], "prefix keys depend on the preamble");
    assert_eq!(i1[1..], i2[1..], "independent keys do not");

    // Preamble 1's first chunk (prefix key only); the document's second chunk put behind
    // preamble 2 with both keys, through the CLI.
    let r = node.put(
        Some(TOKEN_A),
        &g,
        &payload(&g, 1),
        &[("kvfabric-chunk-key", &p1[0])],
    );
    r.block();
    let file = node.dir.path().join("chunk2.bin");
    std::fs::write(&file, payload(&g, 2)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvfabric"))
        .args([
            "put", "--node", &node.url, "--token", TOKEN_A, "--model", "tiny-mla",
        ])
        .args(["--chunk-key", &p2[2], "--chunk-key-independent", &i2[2]])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Lookups find the CLI's block by either key.
    let found = node.post(
        Some(TOKEN_A),
        "/v1/lookup",
        json!({ "keys": [p2[2], i2[2]] }).to_string().as_bytes(),
    );
    let v = found.json();
    let blocks: Vec<&Value> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["block"])
        .collect();
    assert!(blocks[0].is_string() && blocks[0] == blocks[1], "{v}");

    // Mode any (the default): chunk 0 by prefix, chunk 2 by its independent key.
    let r = route(&node, TOKEN_A, &json!({ "keys": p1, "chunks": i1 }));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model"], "tiny-mla", "inferred from a held block: {v}");
    assert_eq!(v["chunks"], 3);
    assert_eq!(v["block_tokens"], 64);
    assert_eq!(v["block_bytes"], 6144);
    assert_eq!(v["bandwidth_source"], "configured");
    let n = only_node(&v);
    assert_eq!(n["node"], "n1");
    assert_eq!(
        (n["prefix_hits"].as_u64(), n["independent_hits"].as_u64()),
        (Some(1), Some(1)),
        "{n}"
    );
    assert_eq!(n["hits"], 2);
    assert_eq!(n["bytes"], 2 * 6144);
    assert_eq!(n["hits_by_tier"], json!({ "gpu": 0, "host": 2, "disk": 0 }));
    assert_eq!(
        (n["fetch"].as_u64(), n["recompute"].as_u64()),
        (Some(0), Some(1)),
        "{n}"
    );
    assert_eq!(n["recompute_tokens"], 64);
    assert!(n["est_seconds"].as_f64().unwrap() > 0.0);
    assert!(
        n["score"].as_f64().unwrap() > 0.0,
        "two hits save time: {n}"
    );

    // Mode prefix ignores `chunks`: only the leading run counts.
    let r = route(
        &node,
        TOKEN_A,
        &json!({ "keys": p1, "chunks": i1, "mode": "prefix" }),
    );
    let v = r.json();
    let n = only_node(&v);
    assert_eq!(
        (n["prefix_hits"].as_u64(), n["independent_hits"].as_u64()),
        (Some(1), Some(0)),
        "{n}"
    );
    assert_eq!(n["recompute"], 2);

    // Another tenant sees nothing, and gets what keys nobody put get.
    let absent = keys(9, 9);
    for (token, body) in [
        (TOKEN_B, json!({ "keys": p1, "chunks": i1 })),
        (TOKEN_A, json!({ "keys": absent.0, "chunks": absent.1 })),
    ] {
        route(&node, token, &body).assert_error(400, "model_required");
        let mut named = body.clone();
        named["model"] = json!("tiny-mla");
        let r = route(&node, token, &named);
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let n = only_node(&v);
        assert_eq!(
            (n["hits"].as_u64(), n["bytes"].as_u64()),
            (Some(0), Some(0)),
            "{n}"
        );
        assert_eq!(n["recompute"], 3);
        assert_eq!(n["hits_by_tier"], json!({ "gpu": 0, "host": 0, "disk": 0 }));
    }

    // Bad input: typed 400s, counted.
    let k = &p1[0];
    for (body, code) in [
        (json!({ "keys": ["zz"] }), "invalid_chunk_key"),
        (
            json!({ "keys": [k], "chunks": ["12"] }),
            "invalid_chunk_key",
        ),
        (json!({ "keys": [k], "chunks": [k, k] }), "invalid_json"),
        (json!({ "keys": [k], "mode": "sideways" }), "invalid_json"),
        (json!({ "keys": [k], "speed": 1 }), "invalid_json"),
        (json!({ "chunks": [k] }), "invalid_json"),
        (json!({ "keys": vec![k; 9] }), "too_many_keys"),
        (
            json!({ "keys": [k], "model": "no-such-model" }),
            "unknown_model",
        ),
        (
            json!({ "keys": [k], "model": "llama-3.1-8b" }),
            "model_not_storable",
        ),
    ] {
        route(&node, TOKEN_A, &body).assert_error(400, code);
    }
    node.post(Some(TOKEN_A), "/v1/route", b"{not json")
        .assert_error(400, "invalid_json");
    node.post(None, "/v1/route", b"{}")
        .assert_error(401, "missing_token");
    assert_eq!(
        node.metric("kvfabric_route_refused_total{node=\"n1\",reason=\"invalid_chunk_key\"}"),
        2.0
    );
    assert_eq!(
        node.metric("kvfabric_route_requests_total{node=\"n1\"}"),
        4.0
    );
    node.assert_serving(77);
}
