//! KV events on a real 3-node cluster: a block installed by a remote fetch is a `stored`
//! event on the node that fetched it, under the engine identity it was put with (asked of the
//! member it came from) and with its token count, and a member whose lease expires after a
//! SIGKILL is a `node_down` event on the survivors' streams. A copy made by push replication
//! is published under the same engine identity (offered ahead of the push).

mod cluster_harness;
mod common;
mod events_client;

use cluster_harness::init_tracing;
use common::{builtin, payload};
use events_client::{blocks, open};

/// The block's token ids, 0.., as the token-ids header writes them.
fn token_ids(g: &kvfabric_store::ModelGeometry) -> String {
    let tokens: Vec<String> = (0..g.block_tokens()).map(|t| t.to_string()).collect();
    tokens.join(",")
}

/// What a `stored` event of a block put with [`engine_headers`] says of its identity.
fn assert_put_identity(stored: &events_client::Msg, g: &kvfabric_store::ModelGeometry) {
    assert_eq!(stored.data["block_tokens"], g.block_tokens());
    assert_eq!(
        stored.data["hashes"],
        serde_json::json!([21, 22, 23, 24]),
        "{stored:?}"
    );
    assert_eq!(stored.data["engine"]["parent_block_hash"], 20);
    assert_eq!(stored.data["engine"]["token_ids"][63], 63);
}

/// The engine headers of a vLLM put: hashes 21..=24 behind parent 20, the block's tokens.
fn engine_headers(tokens: &str) -> [(&'static str, &str); 5] {
    [
        ("kvfabric-engine", "vllm/0.33.0"),
        ("kvfabric-engine-block-hashes", "i:21,i:22,i:23,i:24"),
        ("kvfabric-engine-parent-hash", "i:20"),
        ("kvfabric-engine-page-tokens", "16"),
        ("kvfabric-engine-token-ids", tokens),
    ]
}

#[test]
fn remote_installs_are_stored_events_and_an_expired_member_is_node_down() {
    init_tracing();
    let g = builtin("deepseek-v2-lite");
    tracing::info!("phase 1: three nodes, replication 1 (only the putting node holds a block)");
    let cluster = cluster_harness::kvfabric().cluster_with(3, &["--replication", "1"]);
    cluster.agreed_leader(&[1, 2, 3]);
    let mut on2 = open(cluster.api(2), None, "?since=0", &[]).unwrap();
    let first = on2.next();
    assert_eq!(
        (first.event.as_str(), first.data["node"].as_str()),
        ("epoch", Some("n2"))
    );

    tracing::info!("phase 2: a put on n1, a get on n2 fetches and installs it");
    let tokens = token_ids(&g);
    let r = cluster.put_block(1, &g, &payload(&g, 5), &engine_headers(&tokens));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["block"].as_str().unwrap().to_owned();
    // n2 finds the owners in its own replica of the directory, which may lag the put's
    // commit by a heartbeat: until then its get is a 404.
    let got = cluster.wait_for("n2's replica to know the block's owners", || {
        let r = cluster
            .get(2, &format!("/v1/blocks/{id}"))
            .expect("n2 answered");
        (r.status == 200).then_some(r)
    });
    assert_eq!(got.header("kvfabric-source"), Some("n1"));
    let stored = on2.next();
    assert_eq!(stored.event, "stored", "{stored:?}");
    assert_eq!(stored.data["node"], "n2");
    assert_eq!(stored.data["tier"], "host");
    assert_eq!(stored.data["seq"], 1);
    assert_eq!(blocks(&stored), std::slice::from_ref(&id));
    assert_put_identity(&stored, &g);

    let mut on1 = open(cluster.api(1), None, "?since=0", &[]).unwrap();
    assert_eq!(on1.next().event, "epoch");
    let put = on1.next();
    assert_eq!((put.event.as_str(), blocks(&put)), ("stored", vec![id]));

    tracing::info!("phase 3: SIGKILL n3; its lease expires and the survivors say so");
    cluster.kill(3);
    for s in [&mut on1, &mut on2] {
        let down = s.next();
        assert_eq!(down.event, "node_down", "{down:?}");
        assert_eq!(down.data["down"], "n3");
        assert!(down.data["down_epoch"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn a_pushed_copy_is_published_under_the_engine_identity_it_was_put_with() {
    init_tracing();
    let g = builtin("deepseek-v2-lite");
    tracing::info!("phase 1: three nodes, replication 2 (the put pushes one copy)");
    let cluster = cluster_harness::kvfabric().cluster_with(3, &["--replication", "2"]);
    cluster.agreed_leader(&[1, 2, 3]);

    tracing::info!("phase 2: a vLLM put on n1; its copy is pushed to n2 or n3");
    let tokens = token_ids(&g);
    let r = cluster.put_block(1, &g, &payload(&g, 6), &engine_headers(&tokens));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["replicas"],
        2,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let id = r.json()["block"].as_str().unwrap().to_owned();
    let holders: Vec<u64> = [2, 3]
        .into_iter()
        .filter(|n| cluster.holds(*n, &id))
        .collect();
    // A push hedged on a loaded machine may leave a copy on both (docs/API.md, "Hedging");
    // each is pushed with the put's identity.
    let &[copy, ..] = &holders[..] else {
        panic!("expected a pushed copy on n2 or n3, found none");
    };

    tracing::info!("phase 3: the copy's stored event on n{copy} carries the put's identity");
    let mut feed = open(cluster.api(copy), None, "?since=0", &[]).unwrap();
    assert_eq!(feed.next().event, "epoch");
    let stored = feed.next();
    assert_eq!(stored.event, "stored", "{stored:?}");
    assert_eq!(stored.data["node"], format!("n{copy}"));
    assert_eq!(blocks(&stored), std::slice::from_ref(&id));
    assert_put_identity(&stored, &g);
    let metrics = cluster.operator_get(copy, "/metrics").unwrap();
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.lines()
            .any(|l| l.starts_with("kvfabric_engine_offers{")
                && l.contains("stat=\"used\"")
                && l.ends_with(" 1")),
        "{text}"
    );
}
