//! A minority partition cannot commit; the majority side can, and its history wins on heal.

use std::time::Duration;

use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{Command, NodeId, OwnershipBatch, ReadConsistency, Request, RequestId};
use kvfabric_store::Tier;

use crate::common::{block, chunk, ids, init_tracing, start, LIMIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_partition_cannot_commit_majority_can() -> anyhow::Result<()> {
    init_tracing();
    let (_dir, c) = start(&[1, 2, 3, 4, 5], TestCluster::test_config()).await?;
    let all = ids(&[1, 2, 3, 4, 5]);

    tracing::info!("--- phase 1: commit with everyone connected");
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(leader).join(NodeId(10)).await?;
    let claim = |b: u64| {
        Command::Ownership(OwnershipBatch::claim(
            NodeId(10),
            epoch,
            vec![(block(b), Tier::Host)],
            vec![(chunk(b), block(b))],
        ))
    };
    c.member(leader).submit_checked(claim(1)).await?;

    tracing::info!(%leader, "--- phase 2: cut the leader and one follower off from the rest");
    let partner = *all.iter().find(|n| **n != leader).expect("five members");
    let minority = [leader, partner];
    let majority: Vec<NodeId> = all
        .iter()
        .copied()
        .filter(|n| !minority.contains(n))
        .collect();
    c.router().partition(&[&minority, &majority]);

    tracing::info!("--- phase 3: the minority leader cannot commit");
    let cut_leader = c.member(leader);
    let write = cut_leader.raft().client_write(Request {
        id: RequestId {
            client: 0xdead,
            seq: 1,
        },
        command: claim(666),
    });
    match tokio::time::timeout(Duration::from_secs(3), write).await {
        Err(_) => {}
        Ok(Err(e)) => tracing::info!(error = %e, "minority write refused"),
        Ok(Ok(resp)) => panic!("minority committed entry {}", resp.log_id),
    }
    for n in &majority {
        let seen = c
            .member(*n)
            .resolve(&chunk(666), ReadConsistency::Local)
            .await?;
        assert_eq!(seen, None, "{n} applied a minority write");
    }

    tracing::info!("--- phase 4: the majority elects a leader and commits");
    let new = c.wait_for_leader(&majority, LIMIT).await?;
    let committed = c.member(majority[0]).submit_checked(claim(2)).await?;
    for n in &majority {
        let got = c
            .member(*n)
            .resolve(&chunk(2), ReadConsistency::Linearizable)
            .await?;
        assert_eq!(got, Some(block(2)), "linearizable read on {n}");
    }
    // A linearizable read on the minority side has no quorum to confirm it: it must fail, not
    // answer.
    let cut_read = c
        .member(partner)
        .resolve(&chunk(2), ReadConsistency::Linearizable)
        .await;
    assert!(
        cut_read.is_err(),
        "minority answered a linearizable read: {cut_read:?}"
    );

    tracing::info!(%new, "--- phase 5: heal; the minority's entry is gone everywhere");
    c.router().heal();
    c.wait_applied(&all, committed.log_index, LIMIT).await?;
    let last = c.member(new).submit_checked(claim(3)).await?;
    c.wait_applied(&all, last.log_index, LIMIT).await?;
    for n in &all {
        let d = c.member(*n);
        assert_eq!(
            d.resolve(&chunk(666), ReadConsistency::Local).await?,
            None,
            "{n}"
        );
        assert_eq!(
            d.resolve(&chunk(2), ReadConsistency::Local).await?,
            Some(block(2)),
            "{n}"
        );
        assert_eq!(
            d.resolve(&chunk(3), ReadConsistency::Local).await?,
            Some(block(3)),
            "{n}"
        );
    }
    c.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_and_slow_links_still_commit() -> anyhow::Result<()> {
    init_tracing();
    let (_dir, c) = start(&[1, 2, 3], TestCluster::test_config()).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(leader).join(NodeId(10)).await?;

    tracing::info!("--- phase 1: drop a tenth of all requests and slow every link by 15 ms");
    c.router().set_drop_per_mille(100);
    for a in &all {
        for b in &all {
            if a != b {
                c.router().set_delay_ms(*a, *b, 15);
            }
        }
    }
    let mut last = 0;
    for b in 0..20u64 {
        let via = all[(b % 3) as usize];
        last = c
            .member(via)
            .update_ownership(OwnershipBatch::claim(
                NodeId(10),
                epoch,
                vec![(block(b), Tier::Host)],
                vec![(chunk(b), block(b))],
            ))
            .await?
            .log_index;
    }
    let stats = c.router().stats();
    assert!(stats.dropped > 0, "no request was dropped: {stats:?}");

    tracing::info!(
        ?stats,
        "--- phase 2: heal; every member has every write, once"
    );
    c.router().heal();
    c.wait_applied(&all, last, LIMIT).await?;
    for n in &all {
        let d = c.member(*n);
        for b in 0..20u64 {
            assert_eq!(
                d.resolve(&chunk(b), ReadConsistency::Local).await?,
                Some(block(b)),
                "{n}"
            );
        }
        d.view().read(|s| {
            assert_eq!(s.records_of(NodeId(10)), 20, "{n}");
            s.check_invariants().expect("invariants");
        });
    }
    c.shutdown().await?;
    Ok(())
}
