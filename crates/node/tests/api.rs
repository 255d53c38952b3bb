//! The HTTP API of one real `kvfabric` node process: every route, good and bad input, tenancy.

mod common;

use common::{builtin, payload, tiny, Options, TOKEN_A, TOKEN_B, TOKEN_DOCS, TOKEN_OPERATOR};
use kvfabric_store::rope::{rotate_block, Direction};

fn blocks(id: &str) -> String {
    format!("/v1/blocks/{id}")
}

#[test]
fn put_get_head_delete_round_trip() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let p = payload(&g, 1);
    let r = node.put(Some(TOKEN_A), &g, &p, &[]);
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    assert_eq!(v["dedup"], "new");
    assert_eq!(
        v["bytes"],
        p.len() as u64 + 64,
        "stored bytes: header and payload"
    );
    assert_eq!(v["replicas"], 1);
    let id = r.block();
    assert_eq!(id.len(), 64);
    assert!(id
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    let again = node.put(Some(TOKEN_A), &g, &p, &[]);
    assert_eq!(
        (again.block(), again.json()["dedup"].clone()),
        (id.clone(), "shared".into())
    );

    let got = node.get(Some(TOKEN_A), &blocks(&id), &[]);
    assert_eq!(got.status, 200);
    assert_eq!(got.body, p);
    assert_eq!(got.header("kvfabric-source"), Some("local"));
    assert_eq!(got.header("kvfabric-tier"), Some("host"));
    assert_eq!(got.header("kvfabric-model"), Some("tiny-mla"));
    assert_eq!(got.header("content-type"), Some("application/octet-stream"));
    let upper = node.get(Some(TOKEN_A), &blocks(&id.to_uppercase()), &[]);
    assert_eq!(upper.body, p, "ids are case-insensitive hex");

    let head = node.head(Some(TOKEN_A), &blocks(&id));
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(p.len().to_string().as_str())
    );
    assert_eq!(head.header("kvfabric-tier"), Some("host"));
    assert!(head.body.is_empty());

    assert_eq!(node.delete(Some(TOKEN_A), &blocks(&id)).status, 204);
    node.get(Some(TOKEN_A), &blocks(&id), &[])
        .assert_error(404, "not_found");
    node.head(Some(TOKEN_A), &blocks(&id))
        .status
        .eq(&404)
        .then_some(())
        .unwrap();
    node.delete(Some(TOKEN_A), &blocks(&id))
        .assert_error(404, "not_found");
    let back = node.put(Some(TOKEN_A), &g, &p, &[]);
    assert_eq!(back.block(), id, "the same content gets the same id again");
}

#[test]
fn rotated_puts_read_back_at_any_position_as_the_store_rotates() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let layout = g.block_layout();
    let canonical = payload(&g, 2);
    let (p, q) = (1000u64, 77u64);
    let mut rotated = canonical.clone();
    rotate_block(&layout, &mut rotated, p, Direction::Forward).unwrap();
    assert_ne!(rotated, canonical);

    let pos = p.to_string();
    let id = node
        .put(Some(TOKEN_A), &g, &rotated, &[("kvfabric-position", &pos)])
        .block();
    // What the store's own functions give: un-rotate from p (rounding once), rotate to q.
    let mut stored = rotated.clone();
    rotate_block(&layout, &mut stored, p, Direction::Inverse).unwrap();
    let mut at_q = stored.clone();
    rotate_block(&layout, &mut at_q, q, Direction::Forward).unwrap();
    assert_eq!(node.get(Some(TOKEN_A), &blocks(&id), &[]).body, stored);
    let r = node.get(Some(TOKEN_A), &format!("/v1/blocks/{id}?position={q}"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, at_q);

    // Canonical puts are position-free: the same content is one block, read anywhere.
    let c1 = node.put(Some(TOKEN_A), &g, &canonical, &[]).block();
    let c2 = node.put(Some(TOKEN_A), &g, &canonical, &[]);
    assert_eq!(c2.block(), c1);
    assert_eq!(c2.json()["dedup"], "shared");
    let mut expect = canonical.clone();
    rotate_block(&layout, &mut expect, p, Direction::Forward).unwrap();
    let r = node.get(Some(TOKEN_A), &format!("/v1/blocks/{c1}?position={p}"), &[]);
    assert_eq!(
        r.body, expect,
        "a canonical block read at p is the engine's own rotation"
    );
}

#[test]
fn another_tenants_block_is_indistinguishable_from_an_absent_one() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let key = "5a".repeat(32);
    let theirs = node
        .put(
            Some(TOKEN_A),
            &g,
            &payload(&g, 3),
            &[("kvfabric-chunk-key", &key)],
        )
        .block();
    let absent = "00".repeat(32);
    for path in [blocks(&theirs), format!("/v1/blocks/{theirs}?position=5")] {
        let other = node.get(Some(TOKEN_B), &path, &[]);
        let none = node.get(Some(TOKEN_B), &path.replace(&theirs, &absent), &[]);
        other.assert_error(404, "not_found");
        assert_eq!((other.status, &other.body), (none.status, &none.body));
    }
    let (h1, h2) = (
        node.head(Some(TOKEN_B), &blocks(&theirs)),
        node.head(Some(TOKEN_B), &blocks(&absent)),
    );
    assert_eq!(
        (h1.status, h1.header("content-length")),
        (404, h2.header("content-length"))
    );
    let (d1, d2) = (
        node.delete(Some(TOKEN_B), &blocks(&theirs)),
        node.delete(Some(TOKEN_B), &blocks(&absent)),
    );
    d1.assert_error(404, "not_found");
    assert_eq!(d1.body, d2.body);
    let look = node.post(
        Some(TOKEN_B),
        "/v1/lookup",
        format!(r#"{{"keys":["{key}"]}}"#).as_bytes(),
    );
    assert_eq!(look.json()["results"][0]["block"], serde_json::Value::Null);
    // Naming the other namespace does not help, whether or not it exists.
    let forbidden = node.get(
        Some(TOKEN_B),
        &blocks(&theirs),
        &[("kvfabric-namespace", "a")],
    );
    let nowhere = node.get(
        Some(TOKEN_B),
        &blocks(&theirs),
        &[("kvfabric-namespace", "zz")],
    );
    forbidden.assert_error(403, "namespace_forbidden");
    assert_eq!(forbidden.body, nowhere.body);
    // The owner still reads it, and the same bytes put by b are b's own block.
    assert_eq!(node.get(Some(TOKEN_A), &blocks(&theirs), &[]).status, 200);
    let mine = node.put(Some(TOKEN_B), &g, &payload(&g, 3), &[]);
    assert_eq!(mine.json()["dedup"], "new", "no dedup across tenants");
    assert_ne!(mine.block(), theirs, "ids are keyed per namespace");
}

#[test]
fn shared_namespaces_are_readable_by_every_token_and_writable_by_theirs() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let doc = node.put(Some(TOKEN_DOCS), &g, &payload(&g, 4), &[]).block();
    for t in [TOKEN_A, TOKEN_B, TOKEN_DOCS] {
        assert_eq!(node.get(Some(t), &blocks(&doc), &[]).status, 200, "{t}");
    }
    assert_eq!(
        node.get(
            Some(TOKEN_A),
            &blocks(&doc),
            &[("kvfabric-namespace", "docs")]
        )
        .status,
        200
    );
    node.put(
        Some(TOKEN_A),
        &g,
        &payload(&g, 5),
        &[("kvfabric-namespace", "docs")],
    )
    .assert_error(403, "namespace_forbidden");
    node.delete(Some(TOKEN_A), &blocks(&doc))
        .assert_error(403, "namespace_forbidden");
    assert_eq!(node.delete(Some(TOKEN_DOCS), &blocks(&doc)).status, 204);
    node.assert_serving(6);
}

#[test]
fn missing_or_wrong_tokens_are_401() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let p = payload(&g, 7);
    let id = "ab".repeat(32);
    node.put(None, &g, &p, &[])
        .assert_error(401, "missing_token");
    node.put(Some("not-a-configured-token"), &g, &p, &[])
        .assert_error(401, "invalid_token");
    node.get(None, &blocks(&id), &[])
        .assert_error(401, "missing_token");
    node.get(None, &blocks(&id), &[("authorization", "Basic abc")])
        .assert_error(401, "invalid_token");
    node.post(None, "/v1/lookup", b"{\"keys\":[]}")
        .assert_error(401, "missing_token");
    node.get(None, "/v1/models", &[])
        .assert_error(401, "missing_token");
    node.get(None, "/v1/cluster", &[])
        .assert_error(401, "missing_token");
    assert_eq!(node.head(None, &blocks(&id)).status, 401);
    node.delete(None, &blocks(&id))
        .assert_error(401, "missing_token");
    for open in ["/healthz", "/readyz"] {
        assert_eq!(node.get(None, open, &[]).status, 200, "{open}");
    }
    // Every series counts every tenant's blocks: the operator's only.
    node.get(None, "/metrics", &[])
        .assert_error(401, "missing_token");
    node.get(Some(TOKEN_A), "/metrics", &[])
        .assert_error(403, "operator_only");
    assert_eq!(node.get(Some(TOKEN_OPERATOR), "/metrics", &[]).status, 200);
    node.assert_serving(8);
}

/// `kvfabric_runtime{stat="workers"}` of a node's `/metrics`.
fn runtime_workers(node: &common::TestNode) -> String {
    let text = node.get(Some(TOKEN_OPERATOR), "/metrics", &[]).text();
    text.lines()
        .find(|l| l.starts_with("kvfabric_runtime{") && l.contains("stat=\"workers\""))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no runtime workers gauge in\n{text}"))
        .to_owned()
}

#[test]
fn worker_threads_sets_the_runtime_a_node_runs_on() {
    let capped = common::kvfabric().node(Options {
        worker_threads: Some(1),
        ..Options::default()
    });
    assert_eq!(runtime_workers(&capped), "1");
    capped.assert_serving(3);
    let default = common::kvfabric().node(Options::default());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        runtime_workers(&default),
        cores.max(2).to_string(),
        "one per core, at least 2"
    );
}

#[test]
fn bad_put_input_is_a_json_4xx_and_the_node_keeps_serving() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let p = payload(&g, 9);
    let t = Some(TOKEN_A);
    let len = p.len() as u64;
    let msg = node
        .put_raw(
            t,
            &[("kvfabric-model", "gpt-9"), ("kvfabric-tokens", "64")],
            &p,
        )
        .assert_error(400, "unknown_model");
    assert!(msg.contains("tiny-mla"), "lists the known models: {msg}");
    node.put(t, &builtin("llama-3.1-8b"), &p, &[])
        .assert_error(400, "model_not_storable");
    node.put_raw(t, &[("kvfabric-tokens", "64")], &p)
        .assert_error(400, "missing_header");
    node.put_raw(t, &[("kvfabric-model", "tiny-mla")], &p)
        .assert_error(400, "missing_header");
    node.put_raw(
        t,
        &[("kvfabric-model", "tiny-mla"), ("kvfabric-tokens", "x")],
        &p,
    )
    .assert_error(400, "invalid_header");
    let msg = node
        .put_raw(
            t,
            &[("kvfabric-model", "tiny-mla"), ("kvfabric-tokens", "63")],
            &p,
        )
        .assert_error(400, "token_count");
    assert!(
        msg.contains("expected 64") && msg.contains("found 63"),
        "{msg}"
    );
    let msg = node
        .put(t, &g, &p[..p.len() - 1], &[])
        .assert_error(400, "payload_length");
    assert!(
        msg.contains(&format!("expected {len}")) && msg.contains(&format!("found {}", len - 1)),
        "{msg}"
    );
    let mut long = p.clone();
    long.extend_from_slice(&[0; 10]);
    let msg = node
        .put(t, &g, &long, &[])
        .assert_error(400, "payload_length");
    assert!(msg.contains(&format!("found {}", len + 10)), "{msg}");
    node.put(t, &g, &[], &[])
        .assert_error(400, "payload_length");
    node.put(t, &g, &p, &[("kvfabric-chunk-key", "abc")])
        .assert_error(400, "invalid_chunk_key");
    node.put(t, &g, &p, &[("kvfabric-chunk-key", &"g0".repeat(32))])
        .assert_error(400, "invalid_chunk_key");
    node.put(t, &g, &p, &[("kvfabric-position", "-3")])
        .assert_error(400, "invalid_header");
    node.put(t, &g, &p, &[("kvfabric-position", "99999999999")])
        .assert_error(400, "position_out_of_range");
    // A body longer than declared, sent chunked (no content-length): caught while streaming.
    let chunked = format!(
        "PUT /v1/blocks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN_A}\r\n\
         kvfabric-model: tiny-mla\r\nkvfabric-tokens: 64\r\ntransfer-encoding: chunked\r\n\
         connection: close\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        len + 1,
        "x".repeat(len as usize + 1)
    );
    let answer = node.raw(&chunked);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("\"payload_length\""), "{answer}");
    assert_eq!(
        node.metric("kvfabric_rejected_requests_total{node=\"n1\",reason=\"payload_length\"}"),
        4.0
    );
    node.assert_serving(10);
}

#[test]
fn malformed_ids_and_queries_are_400() {
    let node = common::kvfabric().node(Options::default());
    let t = Some(TOKEN_A);
    for bad in [
        "xyz",
        &"a".repeat(63),
        &"a".repeat(65),
        &"zz".repeat(32),
        "%41%41",
    ] {
        node.get(t, &blocks(bad), &[])
            .assert_error(400, "invalid_block_id");
        assert_eq!(node.head(t, &blocks(bad)).status, 400);
        node.delete(t, &blocks(bad))
            .assert_error(400, "invalid_block_id");
    }
    let id = "ab".repeat(32);
    for q in [
        "position=abc",
        "position=-1",
        "foo=1",
        "position=1&position=2",
    ] {
        node.get(t, &format!("/v1/blocks/{id}?{q}"), &[])
            .assert_error(400, "invalid_query");
    }
    node.get(t, &format!("/v1/blocks/{id}?position=4294967297"), &[])
        .assert_error(400, "position_out_of_range");
    node.get(t, "/v1/nothing", &[])
        .assert_error(404, "route_not_found");
    node.post(t, "/v1/blocks", b"")
        .assert_error(405, "method_not_allowed");
    node.assert_serving(11);
}

#[test]
fn oversized_bodies_are_413_without_being_read() {
    let small = tiny().block_layout().payload_len + 64;
    let node = common::kvfabric().node(Options {
        limits: common::LimitsSection {
            max_body_bytes: Some(small.into()),
            max_lookup_keys: Some(4),
            ..Default::default()
        },
        ..Options::default()
    });
    let answer = node.raw(&format!(
        "PUT /v1/blocks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN_A}\r\n\
         kvfabric-model: tiny-mla\r\nkvfabric-tokens: 64\r\ncontent-length: {}\r\n\r\n",
        small + 1
    ));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"body_too_large\""), "{answer}");
    // A model whose blocks exceed the limit is refused from its headers alone.
    let m = builtin("minicpm3-4b");
    let answer = node.raw(&format!(
        "PUT /v1/blocks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN_A}\r\n\
         kvfabric-model: minicpm3-4b\r\nkvfabric-tokens: 64\r\ncontent-length: {}\r\n\r\n",
        m.block_layout().payload_len
    ));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let answer = node.raw(&format!(
        "POST /v1/lookup HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN_A}\r\n\
         content-length: 100000\r\n\r\n{}",
        "[".repeat(2000)
    ));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // Headers past the node's bound are refused by the HTTP layer.
    let answer = node.raw(&format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "y".repeat(100 << 10)
    ));
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert_eq!(
        node.metric("kvfabric_rejected_requests_total{node=\"n1\",reason=\"body_too_large\"}"),
        3.0
    );
    node.assert_serving(12);
}

#[test]
fn lookups_answer_from_the_chunk_keys_put_here() {
    let node = common::kvfabric().node(Options {
        limits: common::LimitsSection {
            max_lookup_keys: Some(3),
            ..Default::default()
        },
        ..Options::default()
    });
    let g = tiny();
    let (k1, k2) = ("11".repeat(32), "22".repeat(32));
    let id = node
        .put(
            Some(TOKEN_A),
            &g,
            &payload(&g, 13),
            &[("kvfabric-chunk-key", &k1)],
        )
        .block();
    let r = node.post(
        Some(TOKEN_A),
        "/v1/lookup",
        format!(r#"{{"keys":["{k1}","{}"]}}"#, k2.to_uppercase()).as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["results"][0]["key"], k1.as_str());
    assert_eq!(v["results"][0]["block"], id.as_str());
    assert_eq!(v["results"][0]["owners"], serde_json::json!(["n1"]));
    assert_eq!(
        v["results"][1]["key"],
        k2.as_str(),
        "keys come back lowercase"
    );
    assert_eq!(v["results"][1]["block"], serde_json::Value::Null);
    assert_eq!(v["results"][1]["owners"], serde_json::json!([]));

    let t = Some(TOKEN_A);
    node.post(t, "/v1/lookup", br#"{"keys":["nothex"]}"#)
        .assert_error(400, "invalid_chunk_key");
    node.post(t, "/v1/lookup", b"{not json")
        .assert_error(400, "invalid_json");
    node.post(t, "/v1/lookup", br#"{"keys":[],"extra":1}"#)
        .assert_error(400, "invalid_json");
    let four = format!(r#"{{"keys":["{k1}","{k1}","{k1}","{k1}"]}}"#);
    node.post(t, "/v1/lookup", four.as_bytes())
        .assert_error(400, "too_many_keys");
    assert_eq!(node.delete(t, &blocks(&id)).status, 204);
    let after = node.post(
        t,
        "/v1/lookup",
        format!(r#"{{"keys":["{k1}"]}}"#).as_bytes(),
    );
    assert_eq!(after.json()["results"][0]["block"], serde_json::Value::Null);
}

#[test]
fn models_and_cluster_describe_the_node() {
    let node = common::kvfabric().node(Options::default());
    let v = node.get(Some(TOKEN_A), "/v1/models", &[]).json();
    let models = v["models"].as_array().unwrap();
    let tiny = models.iter().find(|m| m["name"] == "tiny-mla").unwrap();
    assert_eq!(tiny["kind"], "mla");
    assert_eq!(tiny["layers"], 2);
    assert_eq!(tiny["block_tokens"], 64);
    assert_eq!(tiny["block_bytes"], 6144);
    assert_eq!(
        tiny["dtypes"],
        serde_json::json!({"c_kv": "bf16", "k_rope": "bf16"})
    );
    let v3 = models.iter().find(|m| m["name"] == "deepseek-v3").unwrap();
    assert_eq!(v3["block_bytes"], 4_497_408);
    let llama = models.iter().find(|m| m["name"] == "llama-3.1-8b").unwrap();
    assert_eq!(llama["storable"], false);

    let c = node.get(Some(TOKEN_A), "/v1/cluster", &[]).json();
    assert_eq!(c["leader"], "n1");
    assert_eq!(c["term"], 0);
    let me = &c["members"][0];
    assert_eq!(me["id"], "n1");
    assert_eq!(me["api"], node.url.as_str());
    assert_eq!(me["healthy"], true);
    let tiers: Vec<&str> = me["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tier"].as_str().unwrap())
        .collect();
    assert_eq!(tiers, ["host", "disk"]);
    assert_eq!(me["tiers"][0]["capacity"], 64 << 20);
}

#[test]
fn metrics_count_what_happened() {
    let g = tiny();
    let block = g.block_layout().payload_len + 64;
    // Room for two blocks in RAM: the third put demotes one to disk.
    let node = common::kvfabric().node(Options {
        host_bytes: 2 * block,
        ..Options::default()
    });
    let m = |s: &str| node.metric(&format!("kvfabric_{s}"));
    let ids: Vec<String> = (0..3)
        .map(|i| {
            node.put(Some(TOKEN_A), &g, &payload(&g, 20 + i), &[])
                .block()
        })
        .collect();
    node.put(Some(TOKEN_A), &g, &payload(&g, 22), &[]).block();
    for id in &ids {
        assert_eq!(node.get(Some(TOKEN_A), &blocks(id), &[]).status, 200);
    }
    node.get(Some(TOKEN_A), &blocks(&"00".repeat(32)), &[]);
    node.get(Some(TOKEN_B), &blocks(&ids[0]), &[]);
    node.put(None, &g, &payload(&g, 1), &[]);

    let len = g.block_layout().payload_len as f64;
    assert_eq!(m("puts_total{node=\"n1\",dedup=\"new\"}"), 3.0);
    assert_eq!(m("puts_total{node=\"n1\",dedup=\"shared\"}"), 1.0);
    assert_eq!(m("bytes_in_total{node=\"n1\"}"), 4.0 * len);
    assert_eq!(m("bytes_out_total{node=\"n1\"}"), 3.0 * len);
    assert_eq!(m("block_misses_total{node=\"n1\"}"), 2.0);
    let hits = m("block_hits_total{node=\"n1\",tier=\"host\"}")
        + m("block_hits_total{node=\"n1\",tier=\"disk\"}");
    assert_eq!(hits, 3.0);
    assert!(m("demotions_total{node=\"n1\"}") >= 1.0);
    assert!(m("block_hits_total{node=\"n1\",tier=\"disk\"}") >= 1.0);
    assert_eq!(
        m("rejected_requests_total{node=\"n1\",reason=\"not_found\"}"),
        2.0
    );
    assert_eq!(
        m("rejected_requests_total{node=\"n1\",reason=\"missing_token\"}"),
        1.0
    );
    assert_eq!(
        m("http_requests_total{node=\"n1\",route=\"/v1/blocks\",method=\"PUT\",status=\"201\"}"),
        4.0
    );
    assert_eq!(
        m("http_requests_total{node=\"n1\",route=\"/v1/blocks/{id}\",method=\"GET\",status=\"404\"}"),
        2.0
    );
    assert_eq!(m("held_blocks{node=\"n1\"}"), 3.0);
    assert_eq!(m("dedup_collisions_total{node=\"n1\"}"), 0.0);
    assert_eq!(m("verify_failures_total{node=\"n1\"}"), 0.0);
}

#[test]
fn a_deepseek_v3_block_round_trips_at_a_position() {
    let node = common::kvfabric().node(Options::default());
    let g = builtin("deepseek-v3");
    let layout = g.block_layout();
    let p = payload(&g, 30);
    assert_eq!(p.len(), 4_497_408);
    let id = node.put(Some(TOKEN_A), &g, &p, &[]).block();
    assert_eq!(node.get(Some(TOKEN_A), &blocks(&id), &[]).body, p);
    let mut at = p.clone();
    rotate_block(&layout, &mut at, 123_456, Direction::Forward).unwrap();
    let r = node.get(
        Some(TOKEN_A),
        &format!("/v1/blocks/{id}?position=123456"),
        &[],
    );
    assert_eq!(r.status, 200);
    assert!(
        r.body == at,
        "rotated read differs from the store's rotation"
    );
}

#[test]
fn an_open_node_needs_no_token() {
    let node = common::kvfabric().node(Options {
        tenants: false,
        ..Options::default()
    });
    let g = tiny();
    let id = node.put(None, &g, &payload(&g, 40), &[]).block();
    assert_eq!(node.get(None, &blocks(&id), &[]).status, 200);
    assert_eq!(node.get(Some("anything"), &blocks(&id), &[]).status, 200);
}
