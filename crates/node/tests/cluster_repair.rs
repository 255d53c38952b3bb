//! Re-replication with real processes: a block put with replication 2 loses one of its two
//! holders (SIGKILL); once that holder's lease expires, the surviving holder copies the block
//! to the third node, which then serves the same bytes from its own store.

mod cluster_harness;
mod common;

use cluster_harness::{init_tracing, Cluster};
use common::{builtin, payload};

const MODEL: &str = "deepseek-v2-lite";

/// The value of `kvfabric_repair{stat="<stat>"}` on node `id`.
fn repair_stat(cluster: &Cluster, id: u64, stat: &str) -> Option<f64> {
    let r = cluster.get(id, "/metrics")?;
    let text = String::from_utf8_lossy(&r.body).to_string();
    let label = format!("stat=\"{stat}\"");
    text.lines()
        .find(|l| l.starts_with("kvfabric_repair{") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn a_block_that_lost_a_holder_is_copied_to_another_node() {
    init_tracing();
    let g = builtin(MODEL);
    tracing::info!("phase 1: three nodes, short leases, frequent repair passes");
    let mut cluster = cluster_harness::kvfabric().cluster_with(
        3,
        &[
            "--cluster-set",
            "lease_ms=3000",
            "--cluster-set",
            "repair_interval_ms=300",
        ],
    );
    cluster.agreed_leader(&[1, 2, 3]);

    tracing::info!("phase 2: a put on n1 is acknowledged with two copies");
    let bytes = payload(&g, 21);
    let r = cluster.put_block(1, &g, &bytes, &[]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["replicas"], 2);
    let id = r.json()["block"].as_str().unwrap().to_owned();
    let holders: Vec<u64> = (1..=3).filter(|n| cluster.holds(*n, &id)).collect();
    assert_eq!(holders.len(), 2, "holders {holders:?}");
    assert!(holders.contains(&1));
    let lost = holders[1];
    let spare = (1..=3).find(|n| !holders.contains(n)).unwrap();
    assert_eq!(
        repair_stat(&cluster, 1, "copies_made"),
        Some(0.0),
        "nothing to repair while both holders live"
    );

    tracing::info!(lost, spare, "phase 3: SIGKILL the second holder");
    cluster.kill(lost);

    tracing::info!("phase 4: n1 copies the block to the spare node");
    cluster.wait_for("the spare node to hold a repaired copy", || {
        cluster.holds(spare, &id).then_some(())
    });
    // The spare holds the copy before n1 hears its answer and counts it.
    cluster.wait_for("n1 to count the copy it made", || {
        (repair_stat(&cluster, 1, "copies_made") == Some(1.0)).then_some(())
    });
    let got = cluster.get(spare, &format!("/v1/blocks/{id}")).unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.header("kvfabric-source"), Some("local"));
    assert!(got.body == bytes, "the repaired copy has the put's bytes");

    tracing::info!("phase 5: the block is at its replication factor again: no more copies");
    cluster.wait_for("n1 to see no under-replicated block", || {
        (repair_stat(&cluster, 1, "under_replicated") == Some(0.0)).then_some(())
    });
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    assert_eq!(repair_stat(&cluster, 1, "copies_made"), Some(1.0));
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}
