//! A member that fell behind a purged log catches up by installing a snapshot.

use std::time::{Duration, Instant};

use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{DirectoryConfig, NodeId, OwnershipBatch, ReadConsistency};
use kvfabric_store::Tier;

use crate::common::{block, chunk, ids, init_tracing, start, LIMIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_member_catches_up_by_snapshot_install() -> anyhow::Result<()> {
    init_tracing();
    let config = DirectoryConfig {
        snapshot_logs_since_last: 20,
        logs_kept_after_snapshot: 0,
        // Small chunks: the snapshot crosses the network in several install requests.
        snapshot_chunk_bytes_max: 2_048,
        ..TestCluster::test_config()
    };
    let (_dir, mut c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let lagging = *all.iter().find(|n| **n != leader).expect("three members");

    tracing::info!(%lagging, "--- phase 1: one follower stops");
    let epoch = c.member(leader).join(NodeId(10)).await?;
    c.stop_member(lagging).await?;
    let lagging_last = c.member(leader).metrics().last_log_index.unwrap_or(0);

    tracing::info!("--- phase 2: the others commit enough to snapshot and purge the log");
    let mut last = 0;
    for b in 0..80u64 {
        last = c
            .member(leader)
            .update_ownership(OwnershipBatch::claim(
                NodeId(10),
                epoch,
                vec![(block(b), Tier::Host)],
                vec![(chunk(b), block(b))],
            ))
            .await?
            .log_index;
    }
    let started = Instant::now();
    loop {
        let m = c.member(leader).metrics();
        let purged = m.purged.map_or(0, |p| p.index);
        if purged > lagging_last + 1 {
            tracing::info!(
                purged,
                lagging_last,
                "leader purged past the lagging member's log"
            );
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "leader never purged its log: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    tracing::info!("--- phase 3: the follower returns; only a snapshot can bring it up to date");
    c.start_member(lagging).await?;
    c.wait_applied(&[lagging], last, LIMIT).await?;
    let m = c.member(lagging).metrics();
    let snap = m.snapshot.expect("the lagging member holds a snapshot");
    assert!(
        snap.index > lagging_last,
        "snapshot {snap} does not cover the purged entries"
    );
    let want = c.member(leader).view().read(Clone::clone);
    let got = c.member(lagging).view().read(Clone::clone);
    assert_eq!(
        got, want,
        "the lagging member's state differs from the leader's"
    );
    got.check_invariants().expect("invariants");

    tracing::info!("--- phase 4: it keeps up with new writes after the install");
    c.member(lagging)
        .update_ownership(OwnershipBatch::claim(
            NodeId(10),
            epoch,
            vec![(block(500), Tier::Disk)],
            vec![(chunk(500), block(500))],
        ))
        .await?;
    for n in &all {
        let got = c
            .member(*n)
            .resolve(&chunk(500), ReadConsistency::Linearizable)
            .await?;
        assert_eq!(got, Some(block(500)), "{n}");
    }
    c.shutdown().await?;
    Ok(())
}

/// With openraft's entry count out of reach, snapshots follow the records applied: none
/// below `snapshot_records_min`, one once a batch of records crosses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_follows_the_records_applied() -> anyhow::Result<()> {
    init_tracing();
    let config = DirectoryConfig {
        snapshot_logs_since_last: 1_000_000,
        snapshot_records_min: 100,
        ..TestCluster::test_config()
    };
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(leader).join(NodeId(10)).await?;
    let batch = |from: u64, n: u64| {
        OwnershipBatch::claim(
            NodeId(10),
            epoch,
            (from..from + n).map(|b| (block(b), Tier::Host)).collect(),
            Vec::new(),
        )
    };
    let first = c.member(leader).update_ownership(batch(0, 60)).await?;
    c.wait_applied(&all, first.log_index, LIMIT).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in &all {
        assert_eq!(
            c.member(*n).metrics().snapshot,
            None,
            "member {n} built a snapshot after 60 records, under the floor of 100"
        );
    }
    let second = c.member(leader).update_ownership(batch(60, 60)).await?;
    let started = Instant::now();
    for n in &all {
        loop {
            let snap = c.member(*n).metrics().snapshot;
            if snap.is_some_and(|s| s.index >= second.log_index) {
                break;
            }
            assert!(
                started.elapsed() < LIMIT,
                "member {n} has no snapshot covering index {} after 120 records: {snap:?}",
                second.log_index
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}
