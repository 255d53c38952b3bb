//! A node killed with SIGKILL and started again serves what it had on disk.
//!
//! The host tier holds one tiny block, so every put demotes the previous block to the disk
//! tier (there is no write-through: a block still in RAM at the kill is lost, and the test
//! says so). Deferred sync is enough here: after SIGKILL the written bytes are in the page
//! cache, which outlives the process.

mod common;

use common::{payload, tiny, Options, TOKEN_A, TOKEN_B};

#[test]
fn a_killed_node_serves_what_it_had_on_disk() {
    let g = tiny();
    let block = g.block_layout().payload_len + 64;
    let mut node = common::kvfabric().node(Options {
        host_bytes: block,
        disk_bytes: Some(16 << 20),
        ..Options::default()
    });
    let puts = [(TOKEN_A, 1), (TOKEN_B, 2), (TOKEN_A, 3)];
    let ids: Vec<String> = puts
        .iter()
        .map(|&(t, seed)| node.put(Some(t), &g, &payload(&g, seed), &[]).block())
        .collect();
    assert!(node.metric("kvfabric_demotions_total{node=\"n1\"}") >= 2.0);
    let first = node.get(Some(TOKEN_A), &format!("/v1/blocks/{}", ids[0]), &[]);
    assert_eq!(first.header("kvfabric-tier"), Some("disk"));
    let old_url = node.url.clone();

    node.kill();
    assert!(!node.is_running());
    node.restart();
    assert_ne!(node.url, "", "restarted on {} (was {old_url})", node.url);
    assert_eq!(
        node.metric("kvfabric_recovered_blocks_total{node=\"n1\"}"),
        2.0
    );

    // Reading the first block promoted it to RAM and pushed the third one to disk: at the
    // kill, blocks 2 and 3 were on disk and block 1 in RAM only.
    for (i, (&(t, seed), id)) in puts.iter().zip(&ids).enumerate() {
        let r = node.get(Some(t), &format!("/v1/blocks/{id}"), &[]);
        if i == 0 {
            r.assert_error(404, "not_found");
        } else {
            assert_eq!(r.status, 200, "block {}: {}", i + 1, r.text());
            assert_eq!(r.body, payload(&g, seed), "block {}", i + 1);
            assert_eq!(r.header("kvfabric-tier"), Some("disk"));
        }
    }
    // Tenancy survives the restart too.
    let other = node.get(Some(TOKEN_B), &format!("/v1/blocks/{}", ids[2]), &[]);
    assert_eq!(other.status, 404);
    node.assert_serving(50);
}
