//! Early replication seen from outside: followers hold the leader's entry while the leader's
//! own write is still held, and a voter that cannot be reached costs a counter, not a write.

use std::time::Duration;

use tokio::time::Instant;

use crate::ids::NodeId;
use crate::preappend::PreappendCounts;
use crate::testing::TestCluster;

pub(crate) const LIMIT: Duration = Duration::from_secs(20);

pub(crate) async fn cluster(
    dir: &std::path::Path,
    preappend: bool,
) -> (TestCluster, NodeId, Vec<NodeId>) {
    let config = crate::DirectoryConfig {
        preappend,
        ..TestCluster::test_config()
    };
    let c = TestCluster::start(dir, &[1, 2, 3], config).await.unwrap();
    let all = [NodeId(1), NodeId(2), NodeId(3)];
    let leader = c.wait_for_leader(&all, LIMIT).await.unwrap();
    // Everything the election wrote is committed and applied everywhere before the test.
    let last = c.member(leader).metrics().last_log_index.unwrap();
    c.wait_applied(&all, last, LIMIT).await.unwrap();
    let followers = all.into_iter().filter(|n| *n != leader).collect();
    (c, leader, followers)
}

/// Whether every follower holds log index `index` within `wait`.
pub(crate) async fn followers_hold(
    c: &TestCluster,
    followers: &[NodeId],
    index: u64,
    wait: Duration,
) -> bool {
    let until = Instant::now() + wait;
    loop {
        let mut all = true;
        for f in followers {
            let got = c
                .member(*f)
                .log_store()
                .entries(index..=index)
                .await
                .unwrap();
            all &= got.len() == 1;
        }
        if all {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The member's counters once `ok` holds for them, or as they stand after `wait`.
async fn counts_once(
    c: &TestCluster,
    id: NodeId,
    wait: Duration,
    ok: impl Fn(&PreappendCounts) -> bool,
) -> PreappendCounts {
    let until = Instant::now() + wait;
    loop {
        let counts = c.member(id).preappends();
        if ok(&counts) || Instant::now() > until {
            return counts;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Holds the leader's log writer, proposes one write, and reports whether the followers held
/// the new entry before the hold was released, the leader's counters then, and once openraft
/// has replicated the entry too. The write commits once released, with the same entry on
/// every member.
async fn held_leader_write(
    preappend: bool,
    wait: Duration,
) -> (bool, PreappendCounts, PreappendCounts) {
    let dir = tempfile::tempdir().unwrap();
    let (c, leader, followers) = cluster(dir.path(), preappend).await;
    let next = c.member(leader).metrics().last_log_index.unwrap() + 1;

    c.member(leader).log_store().hold_writes(true);
    let d = c.member(leader);
    let write = tokio::spawn(async move { d.join(NodeId(10)).await });
    let held = followers_hold(&c, &followers, next, wait).await;
    let counts = counts_once(&c, leader, wait, |n| n.accepted >= 2).await;
    assert!(
        !write.is_finished(),
        "the leader's core waits for its own write"
    );
    c.member(leader).log_store().hold_writes(false);

    write.await.unwrap().unwrap();
    let all = [NodeId(1), NodeId(2), NodeId(3)];
    c.wait_applied(&all, next, LIMIT).await.unwrap();
    let on_leader = c
        .member(leader)
        .log_store()
        .entries(next..=next)
        .await
        .unwrap();
    for f in &followers {
        let got = c.member(*f).log_store().entries(next..=next).await.unwrap();
        assert_eq!(
            got[0].log_id, on_leader[0].log_id,
            "{f} holds the leader's entry"
        );
    }
    let after = counts_once(&c, leader, wait, |n| n.elided >= 2).await;
    c.shutdown().await.unwrap();
    (held, counts, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_write_the_leaders_entry_beside_the_leaders_own_write() {
    let (held, counts, after) = held_leader_write(true, LIMIT).await;
    assert!(
        held,
        "both followers hold the entry while the leader's write is held"
    );
    assert!(
        counts.accepted >= 2,
        "one accepted pre-append per follower: {counts:?}"
    );
    assert_eq!((counts.refused, counts.failed), (0, 0), "{counts:?}");
    assert!(
        after.elided >= 2,
        "openraft's own request for the entry went to each follower without it: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_preappend_followers_wait_for_the_leaders_write() {
    let (held, counts, after) = held_leader_write(false, Duration::from_millis(500)).await;
    assert!(
        !held,
        "openraft replicates only after the leader's own flush"
    );
    assert_eq!(counts, PreappendCounts::default());
    assert_eq!(after, PreappendCounts::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_voter_costs_a_counted_preappend_and_no_write() {
    let dir = tempfile::tempdir().unwrap();
    let (c, leader, followers) = cluster(dir.path(), true).await;
    let cut = followers[0];
    c.router().block_link(leader, cut);
    for node in 10..13 {
        c.member(leader).join(NodeId(node)).await.unwrap();
    }
    let counts = counts_once(&c, leader, LIMIT, |n| {
        n.accepted >= 3 && n.failed + n.dropped >= 1
    })
    .await;
    assert!(
        counts.accepted >= 3,
        "the reachable follower took each: {counts:?}"
    );
    assert!(
        counts.failed + counts.dropped >= 1,
        "the cut follower's pre-appends failed or were dropped: {counts:?}"
    );
    c.router().heal();
    let last = c.member(leader).metrics().last_log_index.unwrap();
    c.wait_applied(&[cut], last, LIMIT).await.unwrap();
    c.shutdown().await.unwrap();
}

#[test]
fn marks_elide_only_what_a_voter_accepted_under_the_same_vote() {
    use openraft::{CommittedLeaderId, EntryPayload, Vote};

    use crate::preappend::{Marks, PreappendStats};
    use crate::type_config::{Entry, LogId};

    let id = |term, index| LogId::new(CommittedLeaderId::new(term, NodeId(1)), index);
    let req = |term, prev: u64, last: u64| openraft::raft::AppendEntriesRequest {
        vote: Vote::new_committed(term, NodeId(1)),
        prev_log_id: Some(id(term, prev)),
        entries: (prev + 1..=last)
            .map(|i| Entry {
                log_id: id(term, i),
                payload: EntryPayload::Blank,
            })
            .collect(),
        leader_commit: Some(id(term, prev)),
    };
    let stats = std::sync::Arc::new(PreappendStats::default());
    let marks = Marks::new(stats.clone());
    let voter = NodeId(2);
    assert!(
        marks.elide(voter, &req(3, 4, 6)).is_none(),
        "nothing accepted yet"
    );

    marks.accepted(voter, Vote::new_committed(3, NodeId(1)), id(3, 6));
    let check = marks.elide(voter, &req(3, 4, 6)).expect("all accepted");
    assert_eq!(
        check.prev_log_id,
        Some(id(3, 6)),
        "a check of the last entry"
    );
    assert!(check.entries.is_empty());
    assert_eq!(
        check.leader_commit,
        Some(id(3, 4)),
        "the commit index rides along"
    );
    assert!(
        marks.elide(voter, &req(3, 1, 5)).is_some(),
        "below the mark"
    );
    assert!(
        marks.elide(voter, &req(3, 5, 7)).is_none(),
        "7 was not accepted"
    );
    assert!(
        marks.elide(NodeId(3), &req(3, 4, 6)).is_none(),
        "another voter"
    );
    assert!(
        marks.elide(voter, &req(4, 4, 6)).is_none(),
        "accepted under another vote"
    );
    assert!(
        marks
            .elide(
                voter,
                &openraft::raft::AppendEntriesRequest {
                    entries: vec![],
                    ..req(3, 4, 6)
                }
            )
            .is_none(),
        "a heartbeat is sent as it is"
    );
    marks.forget(voter);
    assert!(marks.elide(voter, &req(3, 4, 6)).is_none(), "forgotten");
    assert_eq!(stats.counts().elided, 2);
}
