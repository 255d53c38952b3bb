//! Every committed entry survives restarts of every member: one at a time, then all at once.

use std::collections::BTreeMap;

use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{Command, Epoch, NodeId, OwnershipBatch, ReadConsistency};
use kvfabric_store::Tier;
use openraft::EntryPayload;

use crate::common::{block, chunk, ids, init_tracing, start, LIMIT};

/// Commits a claim of block `b` (named by chunk `b`) and records it.
async fn commit(
    c: &TestCluster,
    via: NodeId,
    epoch: Epoch,
    b: u64,
    log: &mut BTreeMap<u64, Command>,
) -> anyhow::Result<u64> {
    let cmd = Command::Ownership(OwnershipBatch::claim(
        NodeId(10),
        epoch,
        vec![(block(b), Tier::Disk)],
        vec![(chunk(b), block(b))],
    ));
    let done = c.member(via).submit_checked(cmd.clone()).await?;
    log.insert(done.log_index, cmd);
    Ok(done.log_index)
}

/// Checks that every member holds every committed entry, unchanged, at its index, and that its
/// state reflects all of them.
async fn audit(
    c: &TestCluster,
    committed: &BTreeMap<u64, Command>,
    values: u64,
) -> anyhow::Result<()> {
    let last = *committed.keys().last().expect("something committed");
    c.wait_applied(&c.running(), last, LIMIT).await?;
    for n in c.running() {
        let d = c.member(n);
        let entries = d.log_store().entries(..).await?;
        let by_index: BTreeMap<u64, _> = entries.iter().map(|e| (e.log_id.index, e)).collect();
        for (index, cmd) in committed {
            let e = by_index
                .get(index)
                .unwrap_or_else(|| panic!("{n} lost committed entry {index}"));
            match &e.payload {
                EntryPayload::Normal(found) => assert_eq!(&found.command, cmd, "{n} entry {index}"),
                other => panic!("{n} entry {index}: expected the command, found {other:?}"),
            }
        }
        for b in 0..values {
            assert_eq!(
                d.resolve(&chunk(b), ReadConsistency::Local).await?,
                Some(block(b)),
                "{n} chunk {b}"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_entry_survives_restarts_of_every_member() -> anyhow::Result<()> {
    init_tracing();
    let (_dir, mut c) = start(&[1, 2, 3], TestCluster::test_config()).await?;
    let all = ids(&[1, 2, 3]);
    let mut committed = BTreeMap::new();
    let mut next = 0u64;

    tracing::info!("--- phase 1: commit a first series");
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(leader).join(NodeId(10)).await?;
    for _ in 0..10 {
        commit(&c, leader, epoch, next, &mut committed).await?;
        next += 1;
    }
    audit(&c, &committed, next).await?;

    tracing::info!("--- phase 2: restart members one at a time, writing while each is down");
    for n in &all {
        c.stop_member(*n).await?;
        let up: Vec<NodeId> = all.iter().copied().filter(|m| m != n).collect();
        c.wait_for_leader(&up, LIMIT).await?;
        for _ in 0..3 {
            commit(&c, up[0], epoch, next, &mut committed).await?;
            next += 1;
        }
        c.start_member(*n).await?;
        audit(&c, &committed, next).await?;
    }

    tracing::info!("--- phase 3: stop every member, then start them all");
    for n in &all {
        c.stop_member(*n).await?;
    }
    for n in &all {
        c.start_member(*n).await?;
    }
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    commit(&c, leader, epoch, next, &mut committed).await?;
    next += 1;
    audit(&c, &committed, next).await?;
    c.shutdown().await?;
    Ok(())
}
