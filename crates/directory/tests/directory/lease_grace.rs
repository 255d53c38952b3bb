//! The lease grace after a gap (`crate::lease` in the directory): leases that ran out while no
//! leader could commit are not expired until the leader has led, in touch with a quorum, for
//! half a lease; a node that renews in that time keeps its records, one that does not is
//! expired once the grace is over.

use std::time::{Duration, Instant};

use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{Directory, Epoch, Liveness, NodeId, OwnershipBatch, ReadConsistency};
use kvfabric_store::Tier;

use crate::common::{block, ids, init_tracing, start, LIMIT};

/// Ticks of the lease ticker a test lets pass where an expiry would have been proposed.
const TICKS: u64 = 15;

async fn liveness(d: &Directory, node: NodeId) -> anyhow::Result<Liveness> {
    let rec = d.node_record(node, ReadConsistency::Linearizable).await?;
    Ok(rec.expect("known node").liveness)
}

/// Nodes 7 and 8 join through `d` and claim one block each.
async fn two_nodes(d: &Directory) -> anyhow::Result<(Epoch, Epoch)> {
    let e7 = d.join(NodeId(7)).await?;
    let e8 = d.join(NodeId(8)).await?;
    for (node, epoch, b) in [(7, e7, 1), (8, e8, 2)] {
        let batch =
            OwnershipBatch::claim(NodeId(node), epoch, vec![(block(b), Tier::Host)], vec![]);
        d.update_ownership(batch).await?;
    }
    Ok((e7, e8))
}

async fn wait_expired(d: &Directory, node: NodeId) -> anyhow::Result<()> {
    let started = Instant::now();
    while liveness(d, node).await? != Liveness::Expired {
        assert!(started.elapsed() < LIMIT, "{node} was never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// In the grace, on the leader `d` at the clock's reading: nodes 7 and 8 are still live and
/// node 7 renews; then, half a lease on (the grace over), node 8, silent, is expired and
/// node 7 is not.
async fn grace_then_expiry(c: &TestCluster, d: &Directory, e7: Epoch) -> anyhow::Result<()> {
    assert_eq!(liveness(d, NodeId(7)).await?, Liveness::Live);
    assert_eq!(liveness(d, NodeId(8)).await?, Liveness::Live);
    let renewed = d.renew_lease(NodeId(7), e7).await;
    assert!(renewed.is_ok(), "node 7 renews in the grace: {renewed:?}");
    tracing::info!("--- half a lease on, node 8, silent, is expired; node 7 is not");
    c.clock().advance(d.config().lease_ms / 2);
    wait_expired(d, NodeId(8)).await?;
    assert_eq!(liveness(d, NodeId(7)).await?, Liveness::Live);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_that_ran_out_before_a_new_leader_was_elected_get_half_a_lease() -> anyhow::Result<()>
{
    init_tracing();
    let config = TestCluster::test_config();
    let (lease_ms, tick_ms) = (config.lease_ms, config.lease_check_interval_ms);
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let old = c.wait_for_leader(&all, LIMIT).await?;
    let (e7, _) = two_nodes(&c.member(old)).await?;

    tracing::info!("--- phase 1: the leader is cut off; both leases run out before an election");
    c.router().isolate(old);
    c.clock().advance(lease_ms + 1);
    let rest: Vec<NodeId> = all.iter().copied().filter(|n| *n != old).collect();
    let new = c.wait_for_leader(&rest, LIMIT).await?;
    let d = c.member(new);

    tracing::info!("--- phase 2: the new leader expires nobody during its grace");
    tokio::time::sleep(Duration::from_millis(TICKS * tick_ms)).await;
    grace_then_expiry(&c, &d, e7).await?;
    assert_eq!(
        d.owners(&block(1), ReadConsistency::Linearizable)
            .await?
            .len(),
        1
    );
    assert!(d
        .owners(&block(2), ReadConsistency::Linearizable)
        .await?
        .is_empty());
    c.router().heal();
    c.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_lost_touch_with_its_voters_waits_half_a_lease_once_back(
) -> anyhow::Result<()> {
    init_tracing();
    let config = TestCluster::test_config();
    let (lease_ms, tick_ms) = (config.lease_ms, config.lease_check_interval_ms);
    let out_of_touch_ms = config.election_timeout_max_ms;
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let d = c.member(leader);
    let (e7, _) = two_nodes(&d).await?;
    let term = d.metrics().current_term;

    tracing::info!("--- phase 1: the voters' answers to the leader are lost (they still hear it)");
    for f in all.iter().filter(|n| **n != leader) {
        c.router().block_link(*f, leader);
    }
    let started = Instant::now();
    while d
        .metrics()
        .millis_since_quorum_ack
        .is_none_or(|a| a <= out_of_touch_ms)
    {
        assert!(started.elapsed() < LIMIT, "the leader never lost touch");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.clock().advance(lease_ms + 1);
    tokio::time::sleep(Duration::from_millis(TICKS * tick_ms)).await;

    tracing::info!("--- phase 2: the answers come back; the same leader expires nobody yet");
    c.router().heal();
    let started = Instant::now();
    while d
        .metrics()
        .millis_since_quorum_ack
        .is_none_or(|a| a > out_of_touch_ms)
    {
        assert!(
            started.elapsed() < LIMIT,
            "the leader never got back in touch"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(TICKS * tick_ms)).await;
    let m = d.metrics();
    assert_eq!(
        (m.current_leader, m.current_term),
        (Some(leader), term),
        "no election"
    );
    grace_then_expiry(&c, &d, e7).await?;
    c.shutdown().await?;
    Ok(())
}
