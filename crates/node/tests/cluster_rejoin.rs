//! A node SIGKILLed and started again rejoins with a new epoch (the directory purged its old
//! records at the join) and registers again the blocks it recovered from its disk tier.

mod cluster_harness;
mod common;

use cluster_harness::init_tracing;
use common::{builtin, payload};

#[test]
fn a_restarted_node_registers_its_recovered_blocks_under_its_new_epoch() {
    init_tracing();
    let g = builtin("deepseek-v2-lite");
    tracing::info!("phase 1: three nodes whose host tier holds one block");
    let mut cluster = cluster_harness::kvfabric().cluster_with(3, &["--host-bytes", "3 MiB"]);
    cluster.agreed_leader(&[1, 2, 3]);

    tracing::info!("phase 2: three puts on n1 push the first block to its disk tier");
    let key = blake3::hash(b"first").to_hex().to_string();
    let mut ids = Vec::new();
    for seed in 0..3u64 {
        let extra: Vec<(&str, &str)> = if seed == 0 {
            vec![("kvfabric-chunk-key", key.as_str())]
        } else {
            Vec::new()
        };
        let r = cluster.put_block(1, &g, &payload(&g, 40 + seed), &extra);
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        ids.push(r.json()["block"].as_str().unwrap().to_owned());
    }
    // HEAD, not GET: a read would promote the block back to RAM, which the kill empties.
    let (status, tier) = cluster.head_block(1, &ids[0]);
    assert_eq!((status, tier.as_deref()), (200, Some("disk")));
    let epoch = cluster.raft_stat(1, "epoch").unwrap();
    cluster.wait_for("n2's replica to show n1 as an owner", || {
        cluster
            .lookup(2, &key)
            .1
            .contains(&"n1".to_owned())
            .then_some(())
    });

    tracing::info!(epoch, "phase 3: SIGKILL n1 and start it again");
    cluster.kill(1);
    cluster.restart(1);
    cluster.wait_for("n1 ready again", || cluster.ready(1).then_some(()));
    let new_epoch = cluster.raft_stat(1, "epoch").unwrap();
    assert!(new_epoch > epoch, "epoch {new_epoch} after {epoch}");

    tracing::info!(
        new_epoch,
        "phase 4: n1 is an owner again, seen from n2 and n3"
    );
    for n in [2, 3] {
        cluster.wait_for("n1 registered again", || {
            let (block, owners) = cluster.lookup(n, &key);
            (block.as_deref() == Some(ids[0].as_str()) && owners.contains(&"n1".to_owned()))
                .then_some(())
        });
    }
    let r = cluster.get(1, &format!("/v1/blocks/{}", ids[0])).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("kvfabric-source"),
        Some("local"),
        "served from its own disk"
    );
    assert_eq!(r.body, payload(&g, 40));
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}
