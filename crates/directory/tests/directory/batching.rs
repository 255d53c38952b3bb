//! Ownership records coalesce per node into Raft entries bounded in size and delay.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{
    Batcher, Command, DirectoryConfig, NodeId, OwnershipBatch, ReadConsistency,
};
use kvfabric_store::Tier;
use openraft::EntryPayload;

use crate::common::{block, ids, init_tracing, start, LIMIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_coalesce_into_entries_bounded_in_size_and_delay() -> anyhow::Result<()> {
    init_tracing();
    let config = DirectoryConfig {
        batch_records_max: 8,
        batch_delay_ms_max: 30,
        ..TestCluster::test_config()
    };
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let follower = *all.iter().find(|n| **n != leader).expect("three members");
    let d = c.member(follower);
    let epoch = d.join(NodeId(5)).await?;

    tracing::info!("--- phase 1: 50 concurrent claims through a follower's batcher");
    let batcher = Arc::new(Batcher::spawn(d.clone(), NodeId(5), epoch));
    let mut tasks = Vec::new();
    for b in 0..50u64 {
        let batcher = batcher.clone();
        tasks.push(tokio::spawn(async move {
            batcher.claim(block(b), Tier::Host, None).await
        }));
    }
    let mut per_entry: BTreeMap<u64, usize> = BTreeMap::new();
    for t in tasks {
        let committed = t.await??;
        *per_entry.entry(committed.log_index).or_default() += 1;
    }

    tracing::info!(
        entries = per_entry.len(),
        "--- phase 2: audit the entries in the log"
    );
    // The callers learn of a commit from the leader; this follower may not hold the entry yet.
    let last = *per_entry.keys().last().expect("at least one entry");
    d.raft()
        .wait(Some(LIMIT))
        .applied_index_at_least(Some(last), "the follower holds every batched entry")
        .await?;
    let entries = d.log_store().entries(..).await?;
    let mut records_in_log = 0;
    for (index, callers) in &per_entry {
        let e = entries
            .iter()
            .find(|e| e.log_id.index == *index)
            .expect("entry in the log");
        let EntryPayload::Normal(request) = &e.payload else {
            panic!("entry {index}: expected a request, found {:?}", e.payload)
        };
        // One batch, or (the batcher pipelines, the leader merges what arrives together)
        // several of this node's batches in one entry.
        let batches: Vec<&OwnershipBatch> = match &request.command {
            Command::Ownership(batch) => vec![batch],
            Command::Merged(requests) => requests
                .iter()
                .map(|r| match &r.command {
                    Command::Ownership(batch) => batch,
                    other => panic!("entry {index}: expected ownership batches, found {other:?}"),
                })
                .collect(),
            other => panic!("entry {index}: expected an ownership batch, found {other:?}"),
        };
        let records: usize = batches.iter().map(|b| b.len()).sum();
        for batch in &batches {
            assert_eq!(batch.node, NodeId(5));
        }
        assert!(records <= 8, "entry {index} carries {records} records");
        assert_eq!(records, *callers, "entry {index}");
        records_in_log += records;
    }
    assert_eq!(records_in_log, 50);
    assert!(
        per_entry.len() < 50,
        "no coalescing: {} entries for 50 records",
        per_entry.len()
    );
    assert!(per_entry.len() >= 50usize.div_ceil(8));
    for b in 0..50 {
        let owners = c
            .member(leader)
            .owners(&block(b), ReadConsistency::Linearizable)
            .await?;
        assert_eq!(owners.len(), 1, "block {b}");
    }

    tracing::info!("--- phase 3: a lone record is proposed after the delay bound, not held");
    let started = Instant::now();
    batcher.claim(block(999), Tier::Disk, None).await?;
    assert!(started.elapsed() < Duration::from_secs(10));
    Arc::try_unwrap(batcher)
        .expect("tasks finished")
        .close()
        .await;
    c.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_entries_keep_the_last_operation_on_each_record() -> anyhow::Result<()> {
    init_tracing();
    let config = DirectoryConfig {
        batch_records_max: 4,
        batch_inflight_max: 4,
        ..TestCluster::test_config()
    };
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let follower = *all.iter().find(|n| **n != leader).expect("three members");
    let d = c.member(follower);
    let epoch = d.join(NodeId(7)).await?;
    let batcher = Batcher::spawn(d.clone(), NodeId(7), epoch);

    // Each pair reaches the batcher in the order written, the second once the first's entry
    // is (most likely) in flight: the second operation on a record is the one that must
    // stand, however the pipeline overlaps entries and the leader orders them.
    let later = Duration::from_micros(300);
    // Dropped requests make the follower retry its forwards: without ordering in the
    // batcher, a retried first operation would land after the second.
    c.router().set_drop_per_mille(150);
    for b in 0..40u64 {
        let (x, y) = tokio::join!(batcher.claim(block(b), Tier::Host, None), async {
            tokio::time::sleep(later).await;
            batcher.release(block(b), Tier::Host).await
        });
        x?;
        y?;
        let (x, y) = tokio::join!(batcher.release(block(1000 + b), Tier::Host), async {
            tokio::time::sleep(later).await;
            batcher.claim(block(1000 + b), Tier::Host, None).await
        });
        x?;
        y?;
    }
    c.router().heal();
    for b in 0..40u64 {
        let released = d.owners(&block(b), ReadConsistency::Linearizable).await?;
        assert!(released.is_empty(), "block {b}: {released:?}");
        let claimed = d
            .owners(&block(1000 + b), ReadConsistency::Linearizable)
            .await?;
        assert_eq!(claimed.len(), 1, "block {}: {claimed:?}", 1000 + b);
    }
    batcher.close().await;
    c.shutdown().await?;
    Ok(())
}
