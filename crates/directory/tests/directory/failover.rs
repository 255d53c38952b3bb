//! A killed leader is replaced, and the new leader commits.

use kvfabric_directory::{NodeId, OwnershipBatch, ReadConsistency};
use kvfabric_store::Tier;

use crate::common::{block, chunk, ids, init_tracing, start, LIMIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_new_leader_commits() -> anyhow::Result<()> {
    init_tracing();
    let (_dir, mut c) = start(
        &[1, 2, 3],
        kvfabric_directory::testing::TestCluster::test_config(),
    )
    .await?;
    let all = ids(&[1, 2, 3]);

    tracing::info!("--- phase 1: elect a leader and commit through it");
    let old = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(old).join(NodeId(10)).await?;
    let before = c
        .member(old)
        .update_ownership(OwnershipBatch::claim(
            NodeId(10),
            epoch,
            vec![(block(1), Tier::Host)],
            vec![(chunk(1), block(1))],
        ))
        .await?;

    tracing::info!(%old, "--- phase 2: kill the leader");
    c.stop_member(old).await?;
    let survivors: Vec<NodeId> = all.iter().copied().filter(|n| *n != old).collect();
    let new = c.wait_for_leader(&survivors, LIMIT).await?;
    assert_ne!(new, old);

    tracing::info!(%new, "--- phase 3: the new leader commits a write sent to a follower");
    let follower = *survivors
        .iter()
        .find(|n| **n != new)
        .expect("two survivors");
    let after = c
        .member(follower)
        .update_ownership(OwnershipBatch::claim(
            NodeId(10),
            epoch,
            vec![(block(2), Tier::Disk)],
            vec![(chunk(2), block(2))],
        ))
        .await?;
    assert!(after.log_index > before.log_index);
    for n in &survivors {
        let got = c
            .member(*n)
            .resolve(&chunk(2), ReadConsistency::Linearizable)
            .await?;
        assert_eq!(got, Some(block(2)), "linearizable read on {n}");
    }

    tracing::info!("--- phase 4: the old leader comes back and catches up");
    c.start_member(old).await?;
    c.wait_applied(&[old], after.log_index, LIMIT).await?;
    assert_eq!(
        c.member(old)
            .resolve(&chunk(2), ReadConsistency::Local)
            .await?,
        Some(block(2))
    );
    assert_eq!(
        c.member(old)
            .resolve(&chunk(1), ReadConsistency::Local)
            .await?,
        Some(block(1))
    );
    c.shutdown().await?;
    Ok(())
}

/// A write forwarded to a leader that then stops answering is not held for the RPC timeout:
/// the forward is abandoned as soon as the follower sees the leadership move, and the write
/// commits through the new leader (here the RPC timeout is longer than the write timeout, so
/// waiting it out would fail the write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_to_a_silent_leader_moves_with_the_leadership() -> anyhow::Result<()> {
    init_tracing();
    let config = kvfabric_directory::DirectoryConfig {
        rpc_timeout_ms: 600_000,
        write_timeout_ms: 60_000,
        ..kvfabric_directory::testing::TestCluster::test_config()
    };
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let old = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(old).join(NodeId(10)).await?;
    let follower = *all.iter().find(|n| **n != old).expect("a follower");

    tracing::info!(%old, %follower, "--- phase 1: the follower's requests to the leader hang");
    c.router().set_delay_ms(follower, old, 600_000);
    let member = c.member(follower);
    let write = tokio::spawn(async move {
        member
            .update_ownership(OwnershipBatch::claim(
                NodeId(10),
                epoch,
                vec![(block(3), Tier::Host)],
                vec![(chunk(3), block(3))],
            ))
            .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    tracing::info!("--- phase 2: the leader falls silent; the others elect a new one");
    c.router().isolate(old);
    let survivors: Vec<NodeId> = all.iter().copied().filter(|n| *n != old).collect();
    let new = c.wait_for_leader(&survivors, LIMIT).await?;
    assert_ne!(new, old);

    tracing::info!(%new, "--- phase 3: the write commits through the new leader");
    let committed = write.await??;
    assert!(committed.log_index > 0);
    let got = c
        .member(new)
        .resolve(&chunk(3), ReadConsistency::Linearizable)
        .await?;
    assert_eq!(got, Some(block(3)));
    Ok(())
}

/// A leader cut off from the others is replaced by a prompt election: a survivor stands once
/// the leader's lease has run out, before openraft's own timer would (lease + election
/// timeout), and the survivors commit through the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_leader_is_replaced_by_a_prompt_election() -> anyhow::Result<()> {
    init_tracing();
    let (_dir, c) = start(
        &[1, 2, 3],
        kvfabric_directory::testing::TestCluster::test_config(),
    )
    .await?;
    let all = ids(&[1, 2, 3]);
    let old = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(old).join(NodeId(10)).await?;

    tracing::info!(%old, "--- phase 1: a healthy leader is left alone");
    tokio::time::sleep(std::time::Duration::from_millis(3_000)).await;
    assert_eq!(c.member(old).current_leader(), Some(old));
    for n in &all {
        assert_eq!(
            c.member(*n).prompt_elections(),
            0,
            "{n} stood against a live leader"
        );
    }

    tracing::info!(%old, "--- phase 2: the leader falls silent");
    c.router().isolate(old);
    let survivors: Vec<NodeId> = all.iter().copied().filter(|n| *n != old).collect();
    let new = c.wait_for_leader(&survivors, LIMIT).await?;
    assert_ne!(new, old);
    assert!(
        c.member(new).prompt_elections() >= 1,
        "the new leader {new} won on openraft's own timer, not a prompt election"
    );

    tracing::info!(%new, "--- phase 3: a write commits through the new leader");
    let follower = *survivors
        .iter()
        .find(|n| **n != new)
        .expect("two survivors");
    let committed = c
        .member(follower)
        .update_ownership(OwnershipBatch::claim(
            NodeId(10),
            epoch,
            vec![(block(4), Tier::Host)],
            vec![(chunk(4), block(4))],
        ))
        .await?;
    assert!(committed.log_index > 0);
    Ok(())
}

/// With `prompt_election` off, elections are openraft's own: a silent leader is still
/// replaced, and nobody stands early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_prompt_elections_openraft_s_timer_replaces_the_leader() -> anyhow::Result<()> {
    init_tracing();
    let config = kvfabric_directory::DirectoryConfig {
        prompt_election: false,
        ..kvfabric_directory::testing::TestCluster::test_config()
    };
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let old = c.wait_for_leader(&all, LIMIT).await?;
    c.router().isolate(old);
    let survivors: Vec<NodeId> = all.iter().copied().filter(|n| *n != old).collect();
    let new = c.wait_for_leader(&survivors, LIMIT).await?;
    assert_ne!(new, old);
    for n in &all {
        assert_eq!(c.member(*n).prompt_elections(), 0, "{n}");
    }
    Ok(())
}
