//! Re-replication with real processes: a block put with replication 2 loses one of its two
//! holders (SIGKILL); once that holder's lease expires, the surviving holder copies the block
//! to the third node, which then serves the same bytes from its own store. And a copy that
//! rots on disk is found by the holder's scrub, dropped from the directory and replaced.

mod cluster_harness;
mod common;

use cluster_harness::{init_tracing, Cluster};
use common::{builtin, payload};

const MODEL: &str = "deepseek-v2-lite";

/// The value of `kvfabric_repair{stat="<stat>"}` on node `id`.
fn repair_stat(cluster: &Cluster, id: u64, stat: &str) -> Option<f64> {
    gauge(cluster, id, "kvfabric_repair", stat)
}

/// The value of `<series>{stat="<stat>"}` on node `id`.
fn gauge(cluster: &Cluster, id: u64, series: &str, stat: &str) -> Option<f64> {
    let r = cluster.get(id, "/metrics")?;
    let text = String::from_utf8_lossy(&r.body).to_string();
    let label = format!("stat=\"{stat}\"");
    text.lines()
        .find(|l| l.starts_with(&format!("{series}{{")) && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Flips one byte in the middle of where `payload` sits in node `id`'s segment files.
fn rot_on_disk(cluster: &Cluster, id: u64, payload: &[u8]) {
    let dir = cluster.path().join(format!("node{id}")).join("disk");
    let probe = &payload[..4096.min(payload.len())];
    for entry in std::fs::read_dir(&dir).expect("disk dir") {
        let path = entry.expect("entry").path();
        let mut bytes = std::fs::read(&path).expect("segment");
        if let Some(at) = bytes.windows(probe.len()).position(|w| w == probe) {
            bytes[at + payload.len() / 2] ^= 0x40;
            std::fs::write(&path, bytes).expect("write segment");
            return;
        }
    }
    panic!("the payload is in no segment file under {}", dir.display());
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
    // A push hedged on a loaded machine may leave a third copy (docs/API.md, "Hedging"):
    // then no node is spare, so the put is made again with another block.
    let (bytes, id, holders) = (21..26u64)
        .find_map(|seed| {
            let bytes = payload(&g, seed);
            let r = cluster.put_block(1, &g, &bytes, &[]);
            assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
            assert_eq!(r.json()["replicas"], 2);
            let id = r.json()["block"].as_str().unwrap().to_owned();
            let holders = cluster.settled_holders(&id);
            assert!(holders.len() >= 2, "holders {holders:?}");
            (holders.len() == 2).then_some((bytes, id, holders))
        })
        .expect("a put left one node without a copy within 5 tries");
    assert!(holders.contains(&1));
    let lost = holders[1];
    let spare = (1..=3).find(|n| !holders.contains(n)).unwrap();
    // The put's claim reached the followers beside the leader's own log write, and openraft's
    // own request for it went without the entry.
    let summed = |stat: &str| -> f64 {
        (1..=3)
            .filter_map(|n| gauge(&cluster, n, "kvfabric_raft_state", stat))
            .sum()
    };
    cluster.wait_for(
        "a pre-append accepted and openraft's request elided",
        || (summed("preappend_accepted") >= 1.0 && summed("preappend_elided") >= 1.0).then_some(()),
    );
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

#[test]
fn a_copy_that_rots_on_disk_is_found_by_the_scrub_and_replaced() {
    init_tracing();
    let g = builtin(MODEL);
    tracing::info!("phase 1: three nodes, a host tier of one block, frequent scrubs and repairs");
    let mut cluster = cluster_harness::kvfabric().cluster_with(
        3,
        &[
            "--host-bytes",
            "3 MiB",
            "--disk-set",
            "scrub_pause_ms=200",
            "--cluster-set",
            "repair_interval_ms=300",
        ],
    );
    cluster.agreed_leader(&[1, 2, 3]);

    tracing::info!("phase 2: a put on n1 with two copies; the next put demotes n1's to disk");
    let bytes = payload(&g, 31);
    let r = cluster.put_block(1, &g, &bytes, &[]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["block"].as_str().unwrap().to_owned();
    let r = cluster.put_block(1, &g, &payload(&g, 32), &[]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(cluster.head_block(1, &id).1.as_deref(), Some("disk"));
    let other = (2..=3)
        .find(|n| cluster.holds(*n, &id))
        .expect("a second holder");

    tracing::info!(
        other,
        "phase 3: n1's copy rots on disk; n1's scrub finds it"
    );
    rot_on_disk(&cluster, 1, &bytes);
    cluster.wait_for("n1's scrub to find the rotten copy", || {
        (gauge(&cluster, 1, "kvfabric_scrub", "lost") == Some(1.0)).then_some(())
    });
    assert!(!cluster.holds(1, &id), "n1 dropped its copy");
    assert!(cluster.log(1).contains("lost a held copy"));
    cluster.wait_for("n1 to release its owner records", || {
        (gauge(&cluster, 1, "kvfabric_tier_moves", "lost_released") == Some(1.0)).then_some(())
    });

    tracing::info!("phase 4: the other holder sees one live copy and makes a second");
    let holders = cluster.wait_for("two holders again", || {
        let h: Vec<u64> = (1..=3).filter(|n| cluster.holds(*n, &id)).collect();
        (h.len() == 2).then_some(h)
    });
    assert!(holders.contains(&other), "{holders:?}");
    for n in holders {
        let got = cluster.get(n, &format!("/v1/blocks/{id}")).unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.header("kvfabric-source"), Some("local"));
        assert!(got.body == bytes, "n{n} serves the put's bytes");
    }
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}
