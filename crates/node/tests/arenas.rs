//! The per-request arenas of DeepSeek-V4 models through a real node's HTTP API: created at the
//! size the geometry gives (every layer's window and open group exactly as `kv_bytes.json`, the
//! shared accounting vectors, counts them), appended token by token, each completed group
//! drained with exactly its rows, each window read back with exactly its last rows; bad input
//! and out-of-step requests refused with their codes and nothing changed; tenancy as for
//! blocks; the table's bounds.

mod common;

use common::{Options, TOKEN_A, TOKEN_B, TOKEN_DOCS};
use kvfabric_test_support::config::{ArenasSection, Bytes};
use serde_json::Value;

const PRO: &str = "deepseek-v4-pro";
const FLASH: &str = "deepseek-v4-flash";

fn kv_bytes() -> Value {
    serde_json::from_str(include_str!("../../store/tests/data/kv_bytes.json")).unwrap()
}

/// The row of `layer` for token `t`: deterministic bytes, different for every (t, layer).
fn row(t: u64, layer: u64, len: usize) -> Vec<u8> {
    let mut x = (t * 1_000 + layer + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 56) as u8
        })
        .collect()
}

fn token(t: u64, layers: u64, len: usize) -> Vec<u8> {
    (0..layers).flat_map(|l| row(t, l, len)).collect()
}

fn octets() -> [(&'static str, &'static str); 1] {
    [("content-type", "application/octet-stream")]
}

fn create(node: &common::TestNode, token: &str, model: &str) -> common::Reply {
    node.post_with(Some(token), "/v1/arenas", &[("kvfabric-model", model)], &[])
}

fn arena(path_id: &str, rest: &str) -> String {
    format!("/v1/arenas/{path_id}{rest}")
}

#[test]
fn a_v4_pro_arena_holds_each_layers_window_and_group_exactly() {
    let node = common::kvfabric().node(Options::default());
    let v = kv_bytes();
    let per = &v["deepseek_v4_pro_per_layer"];
    let created = create(&node, TOKEN_A, PRO);
    assert_eq!(created.status, 201, "{}", created.text());
    let s = created.json();
    let id = s["arena"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32);
    let row_bytes = s["row_bytes"].as_u64().unwrap() as usize;
    let window = s["window_rows"].as_u64().unwrap();
    // A row is an uncompressed entry (576 B: 64 bf16 RoPE dims, 448 fp8 content dims), the
    // window 128 of them: an SWA layer's 128-token block.
    assert_eq!(
        row_bytes as u64,
        per["SWA"]["bytes_per_compressed_entry"].as_u64().unwrap()
    );
    assert_eq!(
        window,
        per["SWA"]["entries_per_128_token_block"].as_u64().unwrap()
    );
    let layers = s["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 61);
    assert_eq!(s["token_bytes"], 61 * row_bytes as u64);
    // Per layer: a window of SWA's block bytes and one open group of its compression's rows.
    let mut total = 0;
    for (i, l) in layers.iter().enumerate() {
        let scheme = l["scheme"].as_str().unwrap();
        assert_eq!(
            scheme,
            if i < 2 || i % 2 == 1 { "hca" } else { "csa" },
            "layer {i}"
        );
        let compression = per[scheme.to_uppercase()]["compression"].as_u64().unwrap();
        assert_eq!(l["group_needed"], compression, "layer {i}");
        assert_eq!(
            (l["appended"].as_u64(), l["window_rows"].as_u64()),
            (Some(0), Some(0))
        );
        total += per["SWA"]["bytes_per_128_token_block"].as_u64().unwrap()
            + compression * row_bytes as u64;
    }
    assert_eq!(s["bytes"], total);
    assert_eq!(total, 6_852_096, "576 × (61 × 128 + 30 × 4 + 31 × 128)");
    assert_eq!(node.metric("kvfabric_arenas{node=\"n1\"}"), 1.0);
    assert_eq!(
        node.metric("kvfabric_arena_bytes{node=\"n1\"}"),
        total as f64
    );

    // 130 tokens, each completed group drained with exactly its rows.
    let tokens = 130u64;
    let mut drained = [0u64; 61];
    for t in 0..tokens {
        let r = node.post_with(
            Some(TOKEN_A),
            &arena(&id, "/tokens"),
            &octets(),
            &token(t, 61, row_bytes),
        );
        assert_eq!(r.status, 200, "token {t}: {}", r.text());
        let a = r.json();
        assert_eq!(a["tokens"], t + 1);
        for l in a["complete"].as_array().unwrap() {
            let l = l.as_u64().unwrap();
            let k = layers[l as usize]["group_needed"].as_u64().unwrap();
            assert_eq!((t + 1) % k, 0, "layer {l} completes every {k} tokens");
            let g = node.post_with(
                Some(TOKEN_A),
                &arena(&id, &format!("/layers/{l}/drain")),
                &[],
                &[],
            );
            assert_eq!(g.status, 200, "{}", g.text());
            assert_eq!(g.header("kvfabric-rows"), Some(k.to_string().as_str()));
            let expect: Vec<u8> = (t + 1 - k..=t).flat_map(|u| row(u, l, row_bytes)).collect();
            assert!(
                g.body == expect,
                "layer {l}: the group's rows, oldest first"
            );
            drained[l as usize] += 1;
        }
    }
    for (l, n) in drained.iter().enumerate() {
        let k = layers[l]["group_needed"].as_u64().unwrap();
        assert_eq!(*n, tokens / k, "layer {l}");
    }
    // Every window: exactly the last 128 tokens' rows (an SWA block's bytes), oldest first.
    let window_bytes = per["SWA"]["bytes_per_128_token_block"].as_u64().unwrap() as usize;
    for l in 0..61u64 {
        let w = node.get(
            Some(TOKEN_A),
            &arena(&id, &format!("/layers/{l}/window")),
            &[],
        );
        assert_eq!(w.status, 200);
        assert_eq!(w.header("kvfabric-rows"), Some("128"));
        assert_eq!(w.body.len(), window_bytes);
        let expect: Vec<u8> = (tokens - window..tokens)
            .flat_map(|u| row(u, l, row_bytes))
            .collect();
        assert!(w.body == expect, "layer {l}: the window's rows");
    }
    let s = node.get(Some(TOKEN_A), &arena(&id, ""), &[]).json();
    assert_eq!(s["layers"][2]["appended"], tokens);
    assert_eq!(s["layers"][2]["group_rows"], tokens % 4);
    assert_eq!(s["layers"][3]["group_rows"], tokens % 128);

    assert_eq!(node.delete(Some(TOKEN_A), &arena(&id, "")).status, 204);
    node.get(Some(TOKEN_A), &arena(&id, ""), &[])
        .assert_error(404, "not_found");
    node.delete(Some(TOKEN_A), &arena(&id, ""))
        .assert_error(404, "not_found");
    assert_eq!(node.metric("kvfabric_arenas{node=\"n1\"}"), 0.0);
    assert_eq!(node.metric("kvfabric_arena_bytes{node=\"n1\"}"), 0.0);
}

#[test]
fn out_of_step_and_malformed_requests_are_refused_and_change_nothing() {
    let node = common::kvfabric().node(Options::default());
    let t = Some(TOKEN_A);
    let s = create(&node, TOKEN_A, FLASH).json();
    let id = s["arena"].as_str().unwrap().to_owned();
    let n = s["row_bytes"].as_u64().unwrap() as usize;
    let layers = s["layers"].as_array().unwrap().len() as u64;
    assert_eq!((layers, s["bytes"].as_u64()), (43, Some(4_693_248)));
    // V4-Flash's layers 0 and 1 are sliding-window only: no group to drain.
    assert_eq!(s["layers"][0]["scheme"], "swa");
    assert_eq!(s["layers"][0]["group_needed"], 0);
    node.post_with(t, &arena(&id, "/layers/0/drain"), &[], &[])
        .assert_error(400, "no_groups");
    let csa = (0..layers)
        .find(|l| s["layers"][*l as usize]["scheme"] == "csa")
        .unwrap();
    node.post_with(t, &arena(&id, &format!("/layers/{csa}/drain")), &[], &[])
        .assert_error(409, "group_incomplete");

    // One row at a time, per layer.
    for u in 0..4 {
        let r = node.post_with(
            t,
            &arena(&id, &format!("/layers/{csa}/rows")),
            &octets(),
            &row(u, csa, n),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            (
                r.json()["appended"].as_u64(),
                r.json()["group_rows"].as_u64()
            ),
            (Some(u + 1), Some(u + 1))
        );
    }
    // The group is complete: the layer takes no row, a whole token is refused and nothing of
    // it is written, until it is drained.
    node.post_with(
        t,
        &arena(&id, &format!("/layers/{csa}/rows")),
        &octets(),
        &row(9, csa, n),
    )
    .assert_error(409, "group_not_drained");
    let before = node.get(t, &arena(&id, ""), &[]).json();
    let msg = node
        .post_with(t, &arena(&id, "/tokens"), &octets(), &token(9, layers, n))
        .assert_error(409, "group_not_drained");
    assert!(msg.contains(&format!("layer {csa}")), "{msg}");
    assert_eq!(node.get(t, &arena(&id, ""), &[]).json(), before);
    let g = node.post_with(t, &arena(&id, &format!("/layers/{csa}/drain")), &[], &[]);
    assert!(g.body == (0..4).flat_map(|u| row(u, csa, n)).collect::<Vec<u8>>());

    // Lengths, layers, ids.
    let msg = node
        .post_with(t, &arena(&id, "/layers/0/rows"), &octets(), &vec![0; n - 1])
        .assert_error(400, "payload_length");
    assert!(
        msg.contains(&format!("expected {n}")) && msg.contains(&format!("found {}", n - 1)),
        "{msg}"
    );
    node.post_with(t, &arena(&id, "/tokens"), &octets(), &vec![0; n])
        .assert_error(400, "payload_length");
    let msg = node
        .post_with(
            t,
            &arena(&id, &format!("/layers/{layers}/rows")),
            &octets(),
            &row(0, 0, n),
        )
        .assert_error(400, "unknown_layer");
    assert!(msg.contains(&format!("below {layers}")), "{msg}");
    node.get(t, &arena(&id, "/layers/x/window"), &[])
        .assert_error(400, "invalid_layer");
    node.get(t, "/v1/arenas/xyz", &[])
        .assert_error(400, "invalid_arena_id");
    node.get(t, &arena(&"ab".repeat(16), ""), &[])
        .assert_error(404, "not_found");
    assert_eq!(
        node.get(t, &arena(&id, ""), &[]).json()["layers"][0]["appended"],
        0
    );

    // Models: MLA and GQA keep no arena; unknown models and a missing header are refused.
    let msg = create(&node, TOKEN_A, "deepseek-v3").assert_error(400, "model_not_hybrid");
    assert!(msg.contains("deepseek-v3"), "{msg}");
    create(&node, TOKEN_A, "llama-3.1-8b").assert_error(400, "model_not_hybrid");
    create(&node, TOKEN_A, "gpt-9").assert_error(400, "unknown_model");
    node.post_with(t, "/v1/arenas", &[], &[])
        .assert_error(400, "missing_header");
    node.assert_serving(31);
}

#[test]
fn arenas_are_tenants_own_like_blocks() {
    let node = common::kvfabric().node(Options::default());
    let id = create(&node, TOKEN_A, PRO).json()["arena"]
        .as_str()
        .unwrap()
        .to_owned();
    // Another tenant: the same 404 and body as an id never issued, for every route.
    let absent = node.get(Some(TOKEN_B), &arena(&"cd".repeat(16), ""), &[]);
    let theirs = node.get(Some(TOKEN_B), &arena(&id, ""), &[]);
    theirs.assert_error(404, "not_found");
    assert_eq!(theirs.body, absent.body);
    node.get(Some(TOKEN_B), &arena(&id, "/layers/0/window"), &[])
        .assert_error(404, "not_found");
    node.post_with(
        Some(TOKEN_B),
        &arena(&id, "/layers/0/rows"),
        &octets(),
        &row(0, 0, 576),
    )
    .assert_error(404, "not_found");
    node.delete(Some(TOKEN_B), &arena(&id, ""))
        .assert_error(404, "not_found");
    node.get(None, &arena(&id, ""), &[])
        .assert_error(401, "missing_token");
    assert_eq!(node.get(Some(TOKEN_A), &arena(&id, ""), &[]).status, 200);

    // An arena of the shared namespace: every token reads it, only its writers change it.
    let docs = create(&node, TOKEN_DOCS, PRO).json()["arena"]
        .as_str()
        .unwrap()
        .to_owned();
    node.post_with(
        Some(TOKEN_DOCS),
        &arena(&docs, "/layers/0/rows"),
        &octets(),
        &row(5, 0, 576),
    );
    let w = node.get(Some(TOKEN_B), &arena(&docs, "/layers/0/window"), &[]);
    assert_eq!(w.status, 200);
    assert!(w.body == row(5, 0, 576));
    node.post_with(
        Some(TOKEN_B),
        &arena(&docs, "/layers/0/rows"),
        &octets(),
        &row(6, 0, 576),
    )
    .assert_error(403, "namespace_forbidden");
    node.delete(Some(TOKEN_A), &arena(&docs, ""))
        .assert_error(403, "namespace_forbidden");
    assert_eq!(node.delete(Some(TOKEN_DOCS), &arena(&docs, "")).status, 204);
}

#[test]
fn the_arena_table_is_bounded_in_count_and_bytes() {
    let node = common::kvfabric().node(Options {
        arenas: Some(ArenasSection {
            arenas_max: Some(2),
            bytes_max: Some(Bytes::Count(2 * 6_852_096 + 4_693_248 - 1)),
        }),
        ..Options::default()
    });
    let a = create(&node, TOKEN_A, PRO).json()["arena"]
        .as_str()
        .unwrap()
        .to_owned();
    let _b = create(&node, TOKEN_B, PRO);
    let msg = create(&node, TOKEN_A, FLASH).assert_error(507, "too_many_arenas");
    assert!(msg.contains("at most 2"), "{msg}");
    assert_eq!(node.delete(Some(TOKEN_A), &arena(&a, "")).status, 204);
    assert_eq!(create(&node, TOKEN_A, PRO).status, 201, "freeing made room");
    // By bytes: with one V4-Pro arena live, a V4-Flash arena is one byte too many.
    let node = common::kvfabric().node(Options {
        arenas: Some(ArenasSection {
            arenas_max: Some(8),
            bytes_max: Some(Bytes::Count(6_852_096 + 4_693_248 - 1)),
        }),
        ..Options::default()
    });
    assert_eq!(create(&node, TOKEN_A, PRO).status, 201);
    let msg = create(&node, TOKEN_A, FLASH).assert_error(507, "arena_budget");
    assert!(msg.contains("4693248") && msg.contains("6852096"), "{msg}");
    assert_eq!(node.metric("kvfabric_arenas{node=\"n1\"}"), 1.0);
    assert_eq!(
        node.metric("kvfabric_rejected_requests_total{node=\"n1\",reason=\"arena_budget\"}"),
        1.0
    );
}
