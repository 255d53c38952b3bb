//! The dedup collision path end to end, in a node built with colliding ids (`--features
//! colliding-ids`: every block id keeps 4 bits of its digest, 16 ids in all, so two payloads
//! share an id within a few puts):
//!
//! `cargo test -p kvfabric-node --features colliding-ids --test collisions`
//!
//! The second put of other bytes under an id is answered `collision` with `variant: 1`;
//! `dedup_collisions` moves on that node; both blocks are served exactly (the id reads the
//! first, `?variant=1` the second, rotated too); each dedups only with its own bytes; on a
//! cluster the second is held by the node that sealed it alone and never served for the id.
#![cfg(feature = "colliding-ids")]

mod cluster_harness;
mod common;

use std::collections::HashMap;

use common::{builtin, payload, tiny, Options, TOKEN_A, TOKEN_B};
use kvfabric_store::rope::{rotate_block, Direction};
use kvfabric_store::ModelGeometry;

/// Puts payloads of `g` of seeds `from..` until one is answered `collision`: the seeds of the
/// first and of the colliding payload, their id, and the colliding put's answer.
fn first_collision(
    g: &ModelGeometry,
    put: impl Fn(&[u8]) -> common::Reply,
    from: u64,
) -> (u64, u64, String, common::Reply) {
    let mut seen: HashMap<String, u64> = HashMap::new();
    for seed in from..from + 64 {
        let r = put(&payload(g, seed));
        assert_eq!(r.status, 201, "{}", r.text());
        let v = r.json();
        let id = v["block"].as_str().unwrap().to_owned();
        match v["dedup"].as_str().unwrap() {
            "new" => {
                assert!(v.get("variant").is_none(), "a first block names no variant");
                assert!(seen.insert(id, seed).is_none());
            }
            "collision" => return (seen[&id], seed, id, r),
            other => panic!("seed {seed}: {other}"),
        }
    }
    panic!("no collision among 64 puts with 16 ids")
}

fn metric(node: &common::TestNode, name: &str) -> f64 {
    node.metric(&format!("kvfabric_{name}{{node=\"n1\"}}"))
}

#[test]
fn a_colliding_put_is_its_own_block_served_exactly_by_variant() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let t = Some(TOKEN_A);
    let (a, b, id, answer) = first_collision(&g, |p| node.put(t, &g, p, &[]), 1);
    assert_eq!(answer.json()["variant"], 1);
    assert_eq!(metric(&node, "dedup_collisions_total"), 1.0);
    assert_eq!(
        node.metric("kvfabric_puts_total{node=\"n1\",dedup=\"collision\"}"),
        1.0
    );
    let (pa, pb) = (payload(&g, a), payload(&g, b));
    assert_ne!(pa, pb);

    // The id reads the first block, `?variant=1` the second, each exactly.
    let path = format!("/v1/blocks/{id}");
    assert_eq!(node.get(t, &path, &[]).body, pa);
    assert_eq!(node.get(t, &format!("{path}?variant=0"), &[]).body, pa);
    let second = node.get(t, &format!("{path}?variant=1"), &[]);
    assert_eq!(second.status, 200);
    assert_eq!(second.header("kvfabric-model"), Some("tiny-mla"));
    assert_eq!(second.body, pb);
    let head = node.head(t, &format!("{path}?variant=1"));
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(pb.len().to_string().as_str())
    );
    // Rotated, as the store rotates its own bytes.
    let mut at = pb.clone();
    rotate_block(&g.block_layout(), &mut at, 700, Direction::Forward).unwrap();
    assert_eq!(
        node.get(t, &format!("{path}?variant=1&position=700"), &[])
            .body,
        at
    );
    node.get(t, &format!("{path}?variant=2"), &[])
        .assert_error(404, "not_found");
    // Another tenant sees neither.
    node.get(Some(TOKEN_B), &format!("{path}?variant=1"), &[])
        .assert_error(404, "not_found");

    // Each dedups with its own bytes only.
    let again_b = node.put(t, &g, &pb, &[]).json();
    assert_eq!(
        (again_b["dedup"].as_str(), again_b["variant"].as_u64()),
        (Some("shared"), Some(1))
    );
    let again_a = node.put(t, &g, &pa, &[]).json();
    assert_eq!(again_a["dedup"], "shared");
    assert!(again_a.get("variant").is_none());
    assert_eq!(metric(&node, "dedup_collisions_total"), 1.0);

    // A third payload under the same id is a third block, counted again (the payloads tried
    // on the way collide under other ids too: every collision answered is counted).
    let mut collisions = 1.0;
    let c = (b + 1..b + 10_000)
        .find(|s| {
            let r = node.put(t, &g, &payload(&g, *s), &[]).json();
            if r["dedup"] == "collision" {
                collisions += 1.0;
            }
            r["block"] == id.as_str() && r["dedup"] == "collision"
        })
        .expect("a third payload under the id");
    assert_eq!(metric(&node, "dedup_collisions_total"), collisions);
    assert_eq!(
        node.metric("kvfabric_puts_total{node=\"n1\",dedup=\"collision\"}"),
        collisions
    );
    assert_eq!(
        node.get(t, &format!("{path}?variant=2"), &[]).body,
        payload(&g, c)
    );

    // A delete of the id drops every variant.
    assert_eq!(node.delete(t, &path).status, 204);
    for v in 0..3 {
        node.get(t, &format!("{path}?variant={v}"), &[])
            .assert_error(404, "not_found");
    }
    node.assert_serving(10_000);
}

#[test]
fn on_a_cluster_the_second_block_stays_on_its_node_and_the_id_reads_the_first() {
    let cluster = cluster_harness::kvfabric().cluster(3);
    cluster.agreed_leader(&[1, 2, 3]);
    let g = builtin("deepseek-v2-lite");
    let (a, b, id, answer) = first_collision(&g, |p| cluster.put_block(1, &g, p, &[]), 100);
    let v = answer.json();
    assert_eq!(v["variant"], 1);
    assert_eq!(v["replicas"], 1, "held by the node that sealed it alone");
    let metrics = cluster.get(1, "/metrics").expect("metrics").text();
    assert!(
        metrics
            .lines()
            .any(|l| l == "kvfabric_dedup_collisions_total{node=\"n1\"} 1"),
        "{metrics}"
    );
    let path = format!("/v1/blocks/{id}");
    let second = cluster.get(1, &format!("{path}?variant=1")).expect("get");
    assert!(second.status == 200 && second.body == payload(&g, b));
    // Every node reads the id as the first block (replicated with the first put).
    for n in 1..=3 {
        let r = cluster.get(n, &path).expect("get");
        assert_eq!(r.status, 200, "n{n}");
        assert!(
            r.body == payload(&g, a),
            "n{n} serves the first block for the id"
        );
    }
    let elsewhere = (2..=3)
        .map(|n| {
            cluster
                .get(n, &format!("{path}?variant=1"))
                .expect("get")
                .status
        })
        .collect::<Vec<_>>();
    assert_eq!(elsewhere, [404, 404], "the second block is n1's alone");
}
