//! `POST /v1/lookup?consistency=linearizable` on real processes: a chunk key put on one node
//! resolves on every other node at once (no waiting for replication of the directory), with
//! its owners; a bad `consistency` is a typed 400; the default stays the local read.

mod cluster_harness;
mod common;

use cluster_harness::init_tracing;
use common::{builtin, payload};

const MODEL: &str = "deepseek-v2-lite";

#[test]
fn a_linearizable_lookup_sees_every_acknowledged_put_on_every_node() {
    init_tracing();
    let g = builtin(MODEL);
    let cluster = cluster_harness::kvfabric().cluster(3);
    cluster.agreed_leader(&[1, 2, 3]);
    for (i, writer) in [1u64, 2, 3].into_iter().enumerate() {
        let key = blake3::hash(&[i as u8, 7]).to_hex().to_string();
        let r = cluster.put_block(
            writer,
            &g,
            &payload(&g, 40 + i as u64),
            &[("kvfabric-chunk-key", &key)],
        );
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let block = r.json()["block"].as_str().unwrap().to_owned();
        // Right after the acknowledgement, every node resolves it when asked linearizably.
        for reader in [1u64, 2, 3] {
            let r = cluster
                .post(
                    reader,
                    "/v1/lookup?consistency=linearizable",
                    &serde_json::json!({ "keys": [key] }),
                )
                .expect("lookup answered");
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            let v = r.json();
            assert_eq!(v["results"][0]["block"], block.as_str(), "n{reader}: {v}");
            // The two copies the put counted (a push hedged on a loaded machine may have
            // left a third: docs/API.md, "Hedging").
            let owners = v["results"][0]["owners"].as_array().unwrap();
            assert!(owners.len() >= 2, "{v}");
            assert!(owners.contains(&format!("n{writer}").into()), "{v}");
        }
    }
    for bad in [
        "consistency=strong",
        "consistency=linearizable&x=1",
        "consistency",
    ] {
        let r = cluster
            .post(
                1,
                &format!("/v1/lookup?{bad}"),
                &serde_json::json!({ "keys": [] }),
            )
            .expect("answered");
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.json()["error"]["code"], "invalid_query", "{bad}");
    }
    let r = cluster
        .post(
            2,
            "/v1/lookup?consistency=local",
            &serde_json::json!({ "keys": [] }),
        )
        .expect("answered");
    assert_eq!(r.status, 200);
}
