//! Kills that lose what a member had not yet written: one log id must name one command on
//! every member, whoever is killed and whatever its writer still held.
//!
//! A killed member's log writer drops every write it has not made (`lose_writes`), the held
//! one included, and the member is reopened at once on what its WAL holds. Afterwards every
//! member's log is compared entry by entry (id and command), every member's state must see
//! the same nodes, and members at one applied entry must hold one state digest.

use std::time::Duration;

use crate::ids::NodeId;
use crate::preappend_tests::{cluster, followers_hold, LIMIT};
use crate::testing::TestCluster;

const ALL: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

/// xorshift64: the tests' seeded choices, so that a failure replays.
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Joins `node` through whichever member leads, asking the next leader when one refuses;
/// the leader's last log index once it is in.
async fn write_through_leader(c: &TestCluster, node: u64) -> u64 {
    for _ in 0..10 {
        let leader = c.wait_for_leader(&ALL, LIMIT).await.unwrap();
        match c.member(leader).join(NodeId(node)).await {
            Ok(_) => return c.member(leader).metrics().last_log_index.unwrap(),
            Err(e) => tracing::info!(%leader, error = %e, "write refused; asking the next leader"),
        }
    }
    panic!("no leader took the join of n{node}");
}

/// Every member's entries `from..=last` agree, id by id and command by command, and every
/// member's state sees the same nodes among `nodes`.
async fn assert_members_agree(c: &TestCluster, from: u64, last: u64, nodes: std::ops::Range<u64>) {
    c.wait_applied(&ALL, last, LIMIT).await.unwrap();
    let mut logs = Vec::new();
    for id in ALL {
        logs.push(c.member(id).log_store().entries(from..=last).await.unwrap());
    }
    for (i, log) in logs.iter().enumerate() {
        assert_eq!(log.len(), logs[0].len(), "{} holds as many entries", ALL[i]);
        for (a, b) in log.iter().zip(&logs[0]) {
            assert_eq!(a.log_id, b.log_id, "{}: ids at one index", ALL[i]);
            assert!(
                a.payload == b.payload,
                "{}: entry {} holds another command than on {}",
                ALL[i],
                a.log_id,
                ALL[0]
            );
        }
    }
    let seen = |id: NodeId| {
        let nodes = nodes.clone();
        c.member(id).view().read(|s| {
            nodes
                .filter(|n| s.node(NodeId(*n)).is_some())
                .collect::<Vec<u64>>()
        })
    };
    for id in &ALL[1..] {
        assert_eq!(
            seen(*id),
            seen(ALL[0]),
            "{id} sees the nodes {} sees",
            ALL[0]
        );
    }
    let digests: Vec<_> = ALL
        .iter()
        .map(|id| c.member(*id).view().digest().unwrap())
        .collect();
    if digests.windows(2).all(|w| w[0].applied == w[1].applied) {
        assert!(
            digests.windows(2).all(|w| w[0].digest == w[1].digest),
            "one applied entry, one digest: {digests:?}"
        );
    }
}

/// The leader's entry reaches both followers by pre-append, then the leader is killed before
/// its own write of it reaches its disk, and restarts at once. Whatever the restarted member
/// writes next must not take the lost entry's id, or the followers (who hold the lost entry
/// under that id) and it apply different commands at one index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_before_writing_a_preappended_entry_never_reuses_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, leader, followers) = cluster(dir.path(), true).await;
    let lost = c.member(leader).metrics().last_log_index.unwrap() + 1;

    c.member(leader).log_store().hold_writes(true);
    let d = c.member(leader);
    let write = tokio::spawn(async move { d.join(NodeId(10)).await });
    assert!(
        followers_hold(&c, &followers, lost, LIMIT).await,
        "both followers hold the pre-appended entry"
    );
    c.member(leader).log_store().lose_writes();
    c.stop_member(leader).await.unwrap();
    let _ = write.await;
    c.start_member(leader).await.unwrap();
    let on_restart = c.member(leader).log_store().entries(lost..=lost).await;
    assert!(
        on_restart.unwrap().is_empty(),
        "the restarted leader's WAL lacks the entry"
    );

    let last = write_through_leader(&c, 11).await;
    assert_members_agree(&c, lost, last, 10..12).await;
    c.shutdown().await.unwrap();
}

/// Rounds of: a member (the leader every other round) has its writes held while a join goes
/// through the leader, is killed after a random moment losing all it had not written, and
/// restarts at once. Seeded, so a failure replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills_that_lose_unwritten_entries_leave_every_log_agreeing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _, _) = cluster(dir.path(), true).await;
    let first = c.member(ALL[0]).metrics().last_log_index.unwrap() + 1;
    let mut rng = Choices(0x6b69_6c6c);
    let rounds = 8;
    for round in 0..rounds {
        let leader = c.wait_for_leader(&ALL, LIMIT).await.unwrap();
        let victim = if round % 2 == 0 {
            leader
        } else {
            ALL[rng.below(ALL.len() as u64) as usize]
        };
        c.member(victim).log_store().hold_writes(true);
        let d = c.member(leader);
        let node = 100 + round;
        let write = tokio::spawn(async move { d.join(NodeId(node)).await });
        tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
        c.member(victim).log_store().lose_writes();
        c.stop_member(victim).await.unwrap();
        let _ = write.await;
        c.start_member(victim).await.unwrap();
    }
    let last = write_through_leader(&c, 100 + rounds).await;
    assert_members_agree(&c, first, last, 100..100 + rounds + 1).await;
    c.shutdown().await.unwrap();
}
