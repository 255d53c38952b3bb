//! Membership changes through the API: add a learner, promote it, remove a voter.

use std::collections::BTreeSet;

use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{NodeId, OwnershipBatch, ReadConsistency};
use kvfabric_store::Tier;

use crate::common::{block, chunk, ids, init_tracing, start, LIMIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_learner_promote_and_remove_through_the_api() -> anyhow::Result<()> {
    init_tracing();
    let (_dir, mut c) = start(&[1, 2, 3], TestCluster::test_config()).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let follower = *all.iter().find(|n| **n != leader).expect("three members");
    let epoch = c.member(leader).join(NodeId(10)).await?;
    let first = c
        .member(leader)
        .update_ownership(OwnershipBatch::claim(
            NodeId(10),
            epoch,
            vec![(block(1), Tier::Host)],
            vec![(chunk(1), block(1))],
        ))
        .await?;

    tracing::info!("--- phase 1: a new member joins as a learner (asked through a follower)");
    c.start_member(NodeId(4)).await?;
    c.member(follower)
        .add_learner(NodeId(4), TestCluster::addr(NodeId(4)))
        .await?;
    c.wait_applied(&[NodeId(4)], first.log_index, LIMIT).await?;
    assert_eq!(
        c.member(NodeId(4))
            .resolve(&chunk(1), ReadConsistency::Local)
            .await?,
        Some(block(1))
    );
    let m = c.member(leader).membership();
    assert!(m.learners.contains(&NodeId(4)), "{m:?}");

    tracing::info!("--- phase 2: the learner is promoted to voter");
    c.member(follower)
        .promote(BTreeSet::from([NodeId(4)]))
        .await?;
    let m = c.member(leader).membership();
    assert_eq!(
        m.voters,
        BTreeSet::from([NodeId(1), NodeId(2), NodeId(3), NodeId(4)])
    );
    assert!(m.learners.is_empty(), "{m:?}");

    tracing::info!(%follower, "--- phase 3: a voter is removed, stopped, and writes go on");
    c.member(leader).remove(follower).await?;
    c.stop_member(follower).await?;
    let rest: Vec<NodeId> = [1, 2, 3, 4]
        .into_iter()
        .map(NodeId)
        .filter(|n| *n != follower)
        .collect();
    let m = c.member(rest[0]).membership();
    assert_eq!(m.voters, rest.iter().copied().collect::<BTreeSet<_>>());
    c.member(NodeId(4))
        .update_ownership(OwnershipBatch::claim(
            NodeId(10),
            epoch,
            vec![(block(2), Tier::Host)],
            vec![(chunk(2), block(2))],
        ))
        .await?;
    for n in &rest {
        let got = c
            .member(*n)
            .resolve(&chunk(2), ReadConsistency::Linearizable)
            .await?;
        assert_eq!(got, Some(block(2)), "{n}");
    }
    c.shutdown().await?;
    Ok(())
}

/// Retries `f` until it succeeds or [`LIMIT`] passes (a change asked during an election fails
/// with no leader, or in progress, until a leader takes it).
async fn retried<T, F, Fut>(mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kvfabric_directory::DirectoryError>>,
{
    let start = std::time::Instant::now();
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() < LIMIT => {
                tracing::info!(error = %e, "retrying a membership change");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Client 10's claim of block `v` (chunk `v`), through `d`.
async fn claim(
    d: &kvfabric_directory::Directory,
    epoch: kvfabric_directory::Epoch,
    v: u64,
) -> Result<kvfabric_directory::Committed, kvfabric_directory::DirectoryError> {
    d.update_ownership(OwnershipBatch::claim(
        NodeId(10),
        epoch,
        vec![(block(v), Tier::Host)],
        vec![(chunk(v), block(v))],
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_leader_replicates_as_a_learner_and_hands_over_when_removed() -> anyhow::Result<()>
{
    init_tracing();
    let (_dir, mut c) = start(&[1, 2, 3, 4], TestCluster::test_config()).await?;
    let all = ids(&[1, 2, 3, 4]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(leader).join(NodeId(10)).await?;
    let rest: Vec<NodeId> = all.iter().copied().filter(|n| *n != leader).collect();

    tracing::info!(%leader, "--- the leader demotes itself to a learner");
    let index = c.member(leader).demote(leader).await?;
    c.wait_applied(&all, index, LIMIT).await?;
    for n in &all {
        let m = c.member(*n).membership();
        assert_eq!(
            m.voters,
            rest.iter().copied().collect::<BTreeSet<_>>(),
            "{n}"
        );
        assert_eq!(m.learners, BTreeSet::from([leader]), "{n}");
    }

    tracing::info!("--- writes commit on the voters' quorum, and the learner applies them");
    // (openraft 0.9 lets a leader demoted to a learner lead on until it leaves the group.)
    let d = c.member(rest[0]);
    let w = retried(|| claim(&d, epoch, 7)).await?;
    c.wait_applied(&all, w.log_index, LIMIT).await?;
    assert_eq!(
        c.member(leader)
            .resolve(&chunk(7), ReadConsistency::Local)
            .await?,
        Some(block(7))
    );

    tracing::info!("--- removed, it hands over: a voter leads and writes go on without it");
    retried(|| d.remove(leader)).await?;
    c.stop_member(leader).await?;
    let next = c.wait_for_leader(&rest, LIMIT).await?;
    assert_ne!(next, leader);
    let w = retried(|| claim(&d, epoch, 8)).await?;
    c.wait_applied(&rest, w.log_index, LIMIT).await?;
    for n in &rest {
        let m = c.member(*n).membership();
        assert_eq!(
            m.voters,
            rest.iter().copied().collect::<BTreeSet<_>>(),
            "{n}"
        );
        assert!(m.learners.is_empty(), "{n}: {m:?}");
    }
    c.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_asked_while_the_leader_is_lost_completes_under_the_next() -> anyhow::Result<()>
{
    init_tracing();
    let (_dir, mut c) = start(&[1, 2, 3], TestCluster::test_config()).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let asker = *all.iter().find(|n| **n != leader).expect("three members");
    c.start_member(NodeId(4)).await?;
    c.member(asker)
        .add_learner(NodeId(4), TestCluster::addr(NodeId(4)))
        .await?;

    tracing::info!(%leader, "--- the leader stops; the promotion is asked at once");
    c.stop_member(leader).await?;
    let d = c.member(asker);
    retried(|| d.promote(BTreeSet::from([NodeId(4)]))).await?;
    let rest: Vec<NodeId> = [1, 2, 3, 4]
        .into_iter()
        .map(NodeId)
        .filter(|n| *n != leader)
        .collect();
    let next = c.wait_for_leader(&rest, LIMIT).await?;
    let want: BTreeSet<NodeId> = [1, 2, 3, 4].into_iter().map(NodeId).collect();
    for n in &rest {
        let m = c.member(*n);
        retried(|| m.read(ReadConsistency::Linearizable, |_| ())).await?;
        assert_eq!(m.membership().voters, want, "{n} (leader {next})");
    }

    tracing::info!("--- the old leader comes back as a follower of the same membership");
    c.start_member(leader).await?;
    let m = c.member(leader);
    retried(|| m.read(ReadConsistency::Linearizable, |_| ())).await?;
    assert_eq!(m.membership().voters, want);
    c.shutdown().await?;
    Ok(())
}
