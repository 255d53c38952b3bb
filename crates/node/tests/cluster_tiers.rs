//! Owner records follow tier moves, with real processes: a block put on a node whose host
//! tier holds one block is demoted to disk by the next put, and the directory's record of it
//! (what `POST /v1/route` counts by tier) moves from host to disk.

mod cluster_harness;
mod common;

use cluster_harness::{init_tracing, Cluster};
use common::{builtin, payload};
use serde_json::json;

const MODEL: &str = "deepseek-v2-lite";

/// n1's `hits_by_tier` for chunk key `key` in a route answer from n1 (`None` while the
/// answer leaves n1 out or is not a 200: the wait that asks retries).
fn n1_tiers(cluster: &Cluster, key: &str) -> Option<serde_json::Value> {
    let body = json!({ "keys": [key], "mode": "prefix", "model": MODEL });
    let r = cluster.post(1, "/v1/route", &body)?;
    if r.status != 200 {
        return None;
    }
    let v = r.json();
    let n1 = v["nodes"].as_array()?.iter().find(|n| n["node"] == "n1")?;
    Some(n1["hits_by_tier"].clone())
}

#[test]
fn a_demoted_block_is_recorded_in_its_new_tier() {
    init_tracing();
    let g = builtin(MODEL);
    let mut cluster = cluster_harness::kvfabric()
        .cluster_with(3, &["--replication", "1", "--host-bytes", "3 MiB"]);
    cluster.agreed_leader(&[1, 2, 3]);
    let key = blake3::hash(b"tier-sync").to_hex().to_string();

    tracing::info!("phase 1: a block on n1's host tier, recorded there");
    let r = cluster.put_block(1, &g, &payload(&g, 1), &[("kvfabric-chunk-key", &key)]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["block"].as_str().unwrap().to_owned();
    assert_eq!(cluster.head_block(1, &id).1.as_deref(), Some("host"));
    cluster.wait_for("the record in the host tier", || {
        (n1_tiers(&cluster, &key)? == json!({ "gpu": 0, "host": 1, "disk": 0 })).then_some(())
    });

    tracing::info!("phase 2: the next put demotes it; the record follows to disk");
    let r = cluster.put_block(1, &g, &payload(&g, 2), &[]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(cluster.head_block(1, &id).1.as_deref(), Some("disk"));
    cluster.wait_for("the record in the disk tier", || {
        (n1_tiers(&cluster, &key)? == json!({ "gpu": 0, "host": 0, "disk": 1 })).then_some(())
    });
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}
