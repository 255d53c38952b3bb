//! The cross-node data path with real processes: a put on one node is replicated to a second
//! (replicas = 2, a verified copy on another node), a get on a node that holds nothing fetches
//! from an owner (bytes equal, `kvfabric-source` names it, the reader then registered as an
//! owner, `?position=` rotated as a local read would be), lookups answer from the directory,
//! a put that cannot reach its replication factor is a typed 503 with the local copy kept, and
//! a block whose owners are all dead is a 404 within a bound.

mod cluster_harness;
mod common;

use cluster_harness::init_tracing;
use common::{builtin, payload};

const MODEL: &str = "deepseek-v2-lite";

fn key(seed: u8) -> String {
    blake3::hash(&[seed]).to_hex().to_string()
}

fn node(name: &str) -> u64 {
    name.trim_start_matches('n').parse().expect("n<id>")
}

#[test]
fn a_put_is_replicated_and_a_get_elsewhere_fetches_verifies_and_registers() {
    init_tracing();
    let g = builtin(MODEL);
    tracing::info!("phase 1: three nodes, replication 2 (the default)");
    let mut cluster = cluster_harness::kvfabric().cluster(3);
    cluster.agreed_leader(&[1, 2, 3]);

    tracing::info!("phase 2: a put on n1 reports two verified replicas");
    // A push hedged on a loaded machine may leave a third copy (docs/API.md, "Hedging"):
    // then no node lacks the block, so the put is made again with another block.
    let (bytes, k, id, block, owners) = (1..=5u8)
        .find_map(|seed| {
            let bytes = payload(&g, 10 + u64::from(seed));
            let k = key(seed);
            let r = cluster.put_block(1, &g, &bytes, &[("kvfabric-chunk-key", &k)]);
            assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
            let put = r.json();
            assert_eq!(put["replicas"], 2, "{put}");
            let id = put["block"].as_str().unwrap().to_owned();
            tracing::info!("phase 3: the directory names two owners, and the second holds a copy");
            // Lookups read the local replica, which may lag the commit by the replication
            // delay. At least the two copies the put counted.
            let (block, owners) = cluster.wait_for("n1's replica to show both owners", || {
                let (block, owners) = cluster.lookup(1, &k);
                (owners.len() >= 2).then_some((block, owners))
            });
            let holders = cluster.settled_holders(&id);
            let spare =
                (1..=3).any(|n| !owners.contains(&format!("n{n}")) && !holders.contains(&n));
            spare.then_some((bytes, k, id, block, owners))
        })
        .expect("a put left one node without a copy within 5 tries");
    assert_eq!(block.as_deref(), Some(id.as_str()));
    assert!(owners.contains(&"n1".to_owned()), "{owners:?}");
    let copy = owners.iter().map(|o| node(o)).find(|n| *n != 1).unwrap();
    assert!(cluster.holds(copy, &id), "n{copy} holds the copy locally");
    let reader = (1..=3)
        .find(|n| !owners.contains(&format!("n{n}")))
        .unwrap();
    assert!(!cluster.holds(reader, &id), "n{reader} holds nothing yet");
    assert_eq!(
        cluster.head_status(reader, &id),
        200,
        "HEAD answers as GET would: an owner holds it"
    );
    cluster.wait_for("every replica of the directory to agree", || {
        (cluster.lookup(reader, &k).1 == owners).then_some(())
    });

    tracing::info!(
        reader,
        "phase 4: a get on the third node fetches from the best owner"
    );
    let got = cluster
        .get(reader, &format!("/v1/blocks/{id}"))
        .expect("get");
    assert_eq!(got.status, 200);
    assert_eq!(got.body, bytes, "the bytes put on n1");
    assert_eq!(
        got.header("kvfabric-source"),
        Some("n1"),
        "same tier: lowest id first"
    );
    cluster.wait_for("the reader to be registered as an owner", || {
        let (_, o) = cluster.lookup(1, &k);
        o.contains(&format!("n{reader}")).then_some(())
    });
    let again = cluster
        .get(reader, &format!("/v1/blocks/{id}"))
        .expect("get");
    assert_eq!(again.header("kvfabric-source"), Some("local"));

    tracing::info!("phase 5: a remote get rotates to ?position= like a local one");
    // As above: a block a hedged push copied to every node has no far node; put another.
    let (bytes2, id2, far) = (20..25u64)
        .find_map(|seed| {
            let bytes2 = payload(&g, seed);
            let r = cluster.put_block(1, &g, &bytes2, &[]);
            assert_eq!(r.status, 201);
            let id2 = r.json()["block"].as_str().unwrap().to_owned();
            let holders = cluster.settled_holders(&id2);
            assert!(holders.len() >= 2, "{holders:?}");
            let far = (1..=3).find(|n| !holders.contains(n))?;
            Some((bytes2, id2, far))
        })
        .expect("a put left one node without a copy within 5 tries");
    let local = cluster
        .get(1, &format!("/v1/blocks/{id2}?position=77"))
        .unwrap();
    let remote = cluster
        .get(far, &format!("/v1/blocks/{id2}?position=77"))
        .unwrap();
    assert_eq!(remote.status, 200);
    assert_ne!(remote.header("kvfabric-source"), Some("local"));
    assert_eq!(remote.body, local.body, "rotated bytes agree");
    assert_ne!(remote.body, bytes2, "position 77 rotates k_rope");

    tracing::info!("phase 6: an unknown block is a 404 on every node, no hang");
    let absent = "ab".repeat(32);
    for n in 1..=3 {
        assert_eq!(
            cluster
                .get(n, &format!("/v1/blocks/{absent}"))
                .unwrap()
                .status,
            404
        );
    }
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}

#[test]
fn short_of_replicas_is_a_typed_503_and_dead_owners_are_503_not_404() {
    init_tracing();
    let g = builtin(MODEL);
    tracing::info!("phase 1: three nodes asked for three copies");
    // No repair: it would copy the blocks short of three copies to the restarted n3.
    let mut cluster = cluster_harness::kvfabric().cluster_with(
        3,
        &[
            "--replication",
            "3",
            "--cluster-set",
            "repair_interval_ms=0",
        ],
    );
    cluster.agreed_leader(&[1, 2, 3]);
    let bytes = payload(&g, 21);
    let r = cluster.put_block(1, &g, &bytes, &[]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["replicas"], 3);
    let id = r.json()["block"].as_str().unwrap().to_owned();

    tracing::info!("phase 2: n3 is killed; a put reaches two copies of three: 503");
    cluster.kill(3);
    let bytes2 = payload(&g, 22);
    let r = cluster.put_block(1, &g, &bytes2, &[]);
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    let err = r.json();
    assert_eq!(err["error"]["code"], "replication_incomplete", "{err}");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("2 of 3"),
        "{err}"
    );
    let message = err["error"]["message"].as_str().unwrap();
    let id2 = message
        .split_whitespace()
        .find(|w| w.len() == 64)
        .expect("the message names the block")
        .to_owned();
    assert!(cluster.holds(1, &id2), "the local copy stays");

    tracing::info!("phase 3: n3 restarts, then n1 and n2 are killed: their copies are unreachable");
    cluster.restart(3);
    cluster.wait_for("n3 ready again", || cluster.ready(3).then_some(()));
    assert!(!cluster.holds(3, &id), "n3 lost its RAM copy with the kill");
    cluster.kill(1);
    cluster.kill(2);
    let r = cluster
        .get(3, &format!("/v1/blocks/{id}"))
        .expect("an answer");
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["code"], "owners_unreachable");
    let absent = "ab".repeat(32);
    let r = cluster
        .get(3, &format!("/v1/blocks/{absent}"))
        .expect("an answer");
    // Alone of three, n3 has no quorum to confirm that nobody holds it: not a 404.
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["code"], "directory_unavailable");
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}
