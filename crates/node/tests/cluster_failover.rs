//! The leader process is SIGKILLed: the two survivors elect a new leader and keep committing
//! (their lease renewals advance the applied index); the killed node, started again, rejoins
//! with a new epoch and becomes ready.

mod cluster_harness;

use cluster_harness::init_tracing;

#[test]
fn a_killed_leader_is_replaced_and_a_restarted_node_rejoins_with_a_new_epoch() {
    init_tracing();
    tracing::info!("phase 1: three nodes up, one leader");
    let mut cluster = cluster_harness::kvfabric().cluster(3);
    let (leader, term) = cluster.agreed_leader(&[1, 2, 3]);
    let old: u64 = leader.trim_start_matches('n').parse().expect("leader id");
    let old_epoch = cluster
        .raft_stat(old, "epoch")
        .expect("epoch of the leader");
    assert!(old_epoch >= 1);
    let survivors: Vec<u64> = (1..=3).filter(|i| *i != old).collect();

    tracing::info!(%leader, term, "phase 2: SIGKILL the leader");
    cluster.kill(old);

    tracing::info!("phase 3: the survivors elect a new leader at a higher term");
    let (new_leader, new_term) = cluster.wait_for("a new leader among the survivors", || {
        let (l, t) = cluster.agreed_leader(&survivors);
        (l != leader).then_some((l, t))
    });
    assert!(new_term > term, "term {new_term} after {term}");

    tracing::info!(%new_leader, "phase 4: the directory still commits (lease renewals apply)");
    let s = survivors[0];
    let applied = cluster.raft_stat(s, "last_applied").expect("last_applied");
    cluster.wait_for("the applied index to advance", || {
        cluster
            .raft_stat(s, "last_applied")
            .is_some_and(|a| a > applied)
            .then_some(())
    });

    tracing::info!("phase 5: the killed node restarts and rejoins with a new epoch");
    cluster.restart(old);
    cluster.wait_for("the restarted node to be ready", || {
        cluster.ready(old).then_some(())
    });
    let new_epoch = cluster
        .raft_stat(old, "epoch")
        .expect("epoch after restart");
    assert!(new_epoch > old_epoch, "epoch {new_epoch} after {old_epoch}");
    let (agreed, _) = cluster.agreed_leader(&[1, 2, 3]);
    tracing::info!(%agreed, "all three agree on a leader again");

    tracing::info!("phase 6: down stops all three");
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}
