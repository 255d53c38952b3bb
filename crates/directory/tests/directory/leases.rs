//! Leases and epochs: an expired lease purges the node's records in one committed entry; a
//! claim from an older incarnation is rejected.

use std::time::{Duration, Instant};

use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{
    Clock, Command, CommandReply, DirectoryError, Liveness, NodeId, OwnershipBatch,
    ReadConsistency, Rejection, ShardId, ShardState,
};
use kvfabric_store::Tier;
use openraft::EntryPayload;

use crate::common::{block, chunk, ids, init_tracing, start, LIMIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_purges_owner_records_in_one_committed_entry() -> anyhow::Result<()> {
    init_tracing();
    let config = TestCluster::test_config();
    let lease_ms = config.lease_ms;
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let d = c.member(leader);

    tracing::info!("--- phase 1: nodes 7 and 8 join and claim; 7 holds 100 records");
    let e7 = d.join(NodeId(7)).await?;
    let e8 = d.join(NodeId(8)).await?;
    for batch in 0..4u64 {
        let blocks: Vec<u64> = (batch * 25..batch * 25 + 25).collect();
        d.update_ownership(OwnershipBatch::claim(
            NodeId(7),
            e7,
            blocks.iter().map(|b| (block(*b), Tier::Host)).collect(),
            blocks.iter().map(|b| (chunk(*b), block(*b))).collect(),
        ))
        .await?;
    }
    // Node 8 shares blocks 0..5 with node 7 and holds 200..205 alone.
    let shared: Vec<u64> = (0..5).chain(200..205).collect();
    d.update_ownership(OwnershipBatch::claim(
        NodeId(8),
        e8,
        shared.iter().map(|b| (block(*b), Tier::Disk)).collect(),
        vec![(chunk(200), block(200))],
    ))
    .await?;

    tracing::info!("--- phase 2: half a lease later node 8 renews, node 7 stays silent");
    c.clock().advance(lease_ms / 2);
    d.renew_lease(NodeId(8), e8).await?;
    assert!(d
        .view()
        .read(|s| s.expired_at(c.clock().now_ms()))
        .is_empty());

    tracing::info!("--- phase 3: past node 7's lease, the leader purges it on its own");
    c.clock().advance(lease_ms / 2 + 1);
    let started = Instant::now();
    loop {
        let gone = c
            .member(leader)
            .view()
            .read(|s| s.records_of(NodeId(7)) == 0);
        if gone {
            break;
        }
        assert!(started.elapsed() < LIMIT, "node 7 was never purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One more write so that every member has applied the purge before we look.
    let last = d.renew_lease(NodeId(8), e8).await;
    assert!(last.is_ok(), "{last:?}");
    let tip = d.metrics().last_applied.expect("applied").index;
    c.wait_applied(&all, tip, LIMIT).await?;

    tracing::info!("--- phase 4: every member agrees, and node 8 kept what it holds");
    for n in &all {
        let m = c.member(*n);
        let rec = m
            .node_record(NodeId(7), ReadConsistency::Local)
            .await?
            .expect("known");
        assert_eq!(rec.liveness, Liveness::Expired, "{n}");
        m.view().read(|s| {
            assert_eq!(s.records_of(NodeId(7)), 0, "{n}");
            assert_eq!(s.records_of(NodeId(8)), 10, "{n}");
            s.check_invariants().expect("invariants");
        });
        assert_eq!(
            m.owners(&block(50), ReadConsistency::Local).await?,
            vec![],
            "{n}"
        );
        // Node 7 was block 50's last holder: its chunk mapping stays, dormant, for a lease
        // (a returning holder's re-registration would revive it), with no owners.
        assert_eq!(
            m.resolve(&chunk(50), ReadConsistency::Local).await?,
            Some(block(50)),
            "{n}"
        );
        let shared_owners = m.owners(&block(3), ReadConsistency::Local).await?;
        assert_eq!(shared_owners.len(), 1, "{n}");
        assert_eq!(shared_owners[0].node, NodeId(8), "{n}");
        // Chunk 3 was mapped by node 7; the block survives with node 8, so the mapping does.
        assert_eq!(
            m.resolve(&chunk(3), ReadConsistency::Local).await?,
            Some(block(3)),
            "{n}"
        );
    }

    tracing::info!("--- phase 4b: a lease later, the dormant mapping of block 50 goes");
    c.clock().advance(lease_ms / 2 + 1);
    let renewed = d.renew_lease(NodeId(8), e8).await;
    assert!(renewed.is_ok(), "{renewed:?}");
    c.clock().advance(lease_ms / 2 + 1);
    let started = Instant::now();
    while c
        .member(leader)
        .resolve(&chunk(50), ReadConsistency::Local)
        .await?
        .is_some()
    {
        assert!(started.elapsed() < LIMIT, "the dormant mapping never went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        c.member(leader)
            .resolve(&chunk(3), ReadConsistency::Local)
            .await?,
        Some(block(3)),
        "node 8 still holds block 3"
    );

    tracing::info!("--- phase 5: replaying the log shows exactly one entry did the purge");
    let entries = d.log_store().entries(..).await?;
    let mut replay = ShardState::new(ShardId(0));
    let mut purging_entries = Vec::new();
    for e in &entries {
        if let EntryPayload::Normal(request) = &e.payload {
            let before = replay.records_of(NodeId(7));
            let reply = replay.apply_request(request, e.log_id.index);
            let after = replay.records_of(NodeId(7));
            if before != after && matches!(request.command, Command::ExpireLeases { .. }) {
                purging_entries.push((e.log_id.index, before, after, reply));
            }
        }
    }
    assert_eq!(purging_entries.len(), 1, "{purging_entries:?}");
    let (_, before, after, reply) = &purging_entries[0];
    assert_eq!((*before, *after), (100, 0));
    let CommandReply::Expired { nodes } = reply else {
        panic!("expected Expired, found {reply:?}")
    };
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].records_purged, 100);

    tracing::info!("--- phase 6: the expired incarnation cannot claim; a new one can");
    let r = d
        .update_ownership(OwnershipBatch::claim(
            NodeId(7),
            e7,
            vec![(block(1), Tier::Host)],
            vec![],
        ))
        .await;
    assert!(
        matches!(
            r,
            Err(DirectoryError::Rejected(Rejection::LeaseExpired {
                node: NodeId(7),
                ..
            }))
        ),
        "{r:?}"
    );
    let e7b = d.join(NodeId(7)).await?;
    assert!(e7b > e7);
    d.update_ownership(OwnershipBatch::claim(
        NodeId(7),
        e7b,
        vec![(block(1), Tier::Host)],
        vec![],
    ))
    .await?;
    c.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_with_a_stale_epoch_are_rejected() -> anyhow::Result<()> {
    init_tracing();
    let (_dir, c) = start(&[1, 2, 3], TestCluster::test_config()).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let follower = *all.iter().find(|n| **n != leader).expect("three members");
    let d = c.member(follower);

    tracing::info!("--- phase 1: node 7 starts (epoch 1) and claims");
    let e1 = d.join(NodeId(7)).await?;
    d.update_ownership(OwnershipBatch::claim(
        NodeId(7),
        e1,
        vec![(block(1), Tier::Gpu)],
        vec![(chunk(1), block(1))],
    ))
    .await?;

    tracing::info!("--- phase 2: node 7 restarts: a new epoch, its old records dropped");
    let e2 = d.join(NodeId(7)).await?;
    assert!(e2 > e1);
    assert_eq!(
        d.owners(&block(1), ReadConsistency::Linearizable).await?,
        vec![]
    );

    tracing::info!("--- phase 3: a claim from the old incarnation is rejected");
    let late = d
        .update_ownership(OwnershipBatch::claim(
            NodeId(7),
            e1,
            vec![(block(2), Tier::Gpu)],
            vec![(chunk(2), block(2))],
        ))
        .await;
    assert_eq!(
        late,
        Err(DirectoryError::Rejected(Rejection::StaleEpoch {
            node: NodeId(7),
            expected: e2,
            found: e1
        }))
    );
    for n in &all {
        let m = c.member(*n);
        assert_eq!(
            m.owners(&block(2), ReadConsistency::Linearizable).await?,
            vec![],
            "{n}"
        );
        assert_eq!(
            m.resolve(&chunk(2), ReadConsistency::Linearizable).await?,
            None,
            "{n}"
        );
    }

    tracing::info!("--- phase 4: the current incarnation claims");
    d.update_ownership(OwnershipBatch::claim(
        NodeId(7),
        e2,
        vec![(block(2), Tier::Gpu)],
        vec![(chunk(2), block(2))],
    ))
    .await?;
    let owners = c
        .member(leader)
        .owners(&block(2), ReadConsistency::Linearizable)
        .await?;
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].epoch, e2);
    c.shutdown().await?;
    Ok(())
}
