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
