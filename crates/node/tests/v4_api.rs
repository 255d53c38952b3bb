//! DeepSeek-V4-Pro blocks through a real node's HTTP API: sealed, read and deduplicated
//! exactly, every layer's CSA / HCA bytes where `kv_bytes.json` (the shared accounting vectors)
//! puts them; a position refused, on a read and on a put, with `position_shift_unsupported`
//! naming the layer, the region and why, and nothing stored by the refused put.

mod common;

use common::{builtin, payload, Options, TOKEN_A};
use kvfabric_store::geometry::LayerScheme;
use serde_json::Value;

fn kv_bytes() -> Value {
    serde_json::from_str(include_str!("../../store/tests/data/kv_bytes.json")).unwrap()
}

fn metric(node: &common::TestNode, name: &str) -> f64 {
    node.metric(&format!("kvfabric_{name}{{node=\"n1\"}}"))
}

#[test]
fn a_v4_pro_block_is_sealed_read_and_deduplicated_exactly_through_the_api() {
    let node = common::kvfabric().node(Options::default());
    let g = builtin("deepseek-v4-pro");
    let layout = g.block_layout();
    let v = kv_bytes();
    let per = &v["deepseek_v4_pro_per_layer"];
    assert_eq!(
        u64::from(layout.block_tokens),
        v["deepseek_v4_pro_block_tokens"].as_u64().unwrap()
    );
    let p = payload(&g, 11);
    assert_eq!(p.len() as u64, layout.payload_len);

    let first = node.put(Some(TOKEN_A), &g, &p, &[]);
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.json()["dedup"], "new");
    assert_eq!(first.json()["bytes"], layout.payload_len + 64);
    let id = first.block();
    let again = node.put(Some(TOKEN_A), &g, &p, &[]);
    assert_eq!(
        (again.block(), again.json()["dedup"].clone()),
        (id.clone(), "shared".into())
    );
    let other = payload(&g, 12);
    let second = node.put(Some(TOKEN_A), &g, &other, &[]);
    assert_eq!(second.json()["dedup"], "new");
    assert_ne!(second.block(), id);

    let got = node.get(Some(TOKEN_A), &format!("/v1/blocks/{id}"), &[]);
    assert_eq!(got.status, 200);
    assert_eq!(got.header("kvfabric-model"), Some("deepseek-v4-pro"));
    assert_eq!(got.body.len(), p.len());
    // Layer by layer: its bytes are the accounted ones, in order, and what was put.
    let mut offset = 0usize;
    for (i, layer) in layout.layers.iter().enumerate() {
        let key = match layer.scheme.unwrap() {
            LayerScheme::Csa => "CSA",
            LayerScheme::Hca => "HCA",
            LayerScheme::Swa => "SWA",
        };
        let expect = per[key]["bytes_per_128_token_block"].as_u64().unwrap() as usize;
        assert_eq!(layer.len() as usize, expect, "layer {i} {key}");
        let end = offset + expect;
        assert!(got.body[offset..end] == p[offset..end], "layer {i} {key}");
        offset = end;
    }
    assert_eq!(offset, p.len());
    assert_eq!(metric(&node, "held_blocks"), 2.0);
}

#[test]
fn a_position_is_refused_on_v4_reads_and_puts_naming_the_layer_region_and_reason() {
    let node = common::kvfabric().node(Options::default());
    let g = builtin("deepseek-v4-pro");
    let p = payload(&g, 21);
    let id = node.put(Some(TOKEN_A), &g, &p, &[]).block();

    let msg = node
        .get(
            Some(TOKEN_A),
            &format!("/v1/blocks/{id}?position=1000"),
            &[],
        )
        .assert_error(400, "position_shift_unsupported");
    // Layer 2 is V4-Pro's first CSA layer: its fp4 indexer key holds 64 RoPE dims.
    for part in ["layer 2", "`indexer`", "fp4", "64 of its 128 dims"] {
        assert!(msg.contains(part), "{part:?} in {msg}");
    }
    // Without a position the same block is served exactly.
    let got = node.get(Some(TOKEN_A), &format!("/v1/blocks/{id}"), &[]);
    assert!(got.status == 200 && got.body == p);

    // A rotated put is refused before its body is stored: nothing new is held.
    let held = metric(&node, "held_blocks");
    let msg = node
        .put(
            Some(TOKEN_A),
            &g,
            &payload(&g, 22),
            &[("kvfabric-position", "4096")],
        )
        .assert_error(400, "position_shift_unsupported");
    assert!(
        msg.contains("layer 2") && msg.contains("`indexer`"),
        "{msg}"
    );
    assert_eq!(metric(&node, "held_blocks"), held);
    assert_eq!(
        node.metric(
            "kvfabric_rejected_requests_total{node=\"n1\",reason=\"position_shift_unsupported\"}"
        ),
        2.0
    );
    // An MLA block on the same node still rotates.
    let v3 = builtin("deepseek-v3");
    let mla = node.put(Some(TOKEN_A), &v3, &payload(&v3, 23), &[]).block();
    let r = node.get(
        Some(TOKEN_A),
        &format!("/v1/blocks/{mla}?position=1000"),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // HEAD answers as GET would, the rotation's refusal included, without a body.
    let head = |block: &str| {
        node.head(Some(TOKEN_A), &format!("/v1/blocks/{block}?position=1000"))
            .status
    };
    assert_eq!((head(&id), head(&mla)), (400, 200));
    node.assert_serving(24);
}
