//! Pre-vote: a member asks the other voters whether they have lost their leader too before
//! it stands for election, so a member cut off alone cannot unseat a leader the others hear.
//!
//! Why: a campaign raises the candidate's term whether or not it can win. A member that
//! stops hearing its leader while the rest of the cluster still does (a one-way cut, a
//! partition that leaves the leader with the majority) campaigns every few hundred
//! milliseconds and loses every time, its term climbing; when the cut heals, the leader
//! sees that higher term in the member's answers and steps down, and the cluster takes no
//! writes until the next election ends (session 25's seed-27 chaos run: n1, cut off from
//! the leader n2 for 3 s, reached term 45 from 41; after the heal n2 quit at once and the
//! directory had no leader for 0.35 s).
//!
//! How (Raft's pre-vote, as etcd does it): before [`crate::election`]'s watchdog calls an
//! election, it sends [`PreVoteRequest`] to every other voter and stands only when a
//! majority, itself included, grants it within `election_timeout_min_ms`. A voter grants
//! when it is not the leader and has heard no leader (no AppendEntries accepted, no vote
//! granted) for at least `election_timeout_min_ms`, twice the heartbeat: what it would see
//! if the leader were gone. Nothing changes state on either side, so a refused pre-vote
//! costs one round trip and the member tries again after its campaign spacing. openraft's
//! own election timer is off on a member with prompt elections (it would raise the term
//! without asking); every election goes through here.
//!
//! A member that does not know this request (a build from before it) answers nothing and
//! counts as refusing: a cluster mixing such builds elects through its older members.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::directory::Inner;
use crate::ids::NodeId;
use crate::rpc::{PreVoteRequest, PreVoteResponse, RpcRequest, RpcResponse};

/// Whether a voter grants a pre-vote at `now`: it does not lead, and its last contact with a
/// leader is at least `quiet_min` old.
pub(crate) fn grants(now: Instant, leads: bool, contact: Instant, quiet_min: Duration) -> bool {
    !leads && now.saturating_duration_since(contact) >= quiet_min
}

/// What a round of pre-votes found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Round {
    /// Voters in the membership, this member included.
    pub(crate) voters: usize,
    /// Grants, this member's own included.
    pub(crate) granted: usize,
}

impl Round {
    /// Whether the grants are a majority of the voters.
    pub(crate) fn won(&self) -> bool {
        2 * self.granted > self.voters
    }
}

/// Asks every other voter for a pre-vote, each call bounded by `limit`; returns as soon as
/// a majority has granted or every voter has answered or timed out.
pub(crate) async fn ask(inner: &Inner, limit: Duration) -> Round {
    let me = inner.id;
    let others: Vec<(NodeId, String)> = {
        let m = inner.raft.metrics();
        let m = m.borrow();
        let membership = m.membership_config.membership();
        membership
            .voter_ids()
            .filter(|v| *v != me)
            .filter_map(|v| membership.get_node(&v).map(|n| (v, n.addr.clone())))
            .collect()
    };
    let mut round = Round {
        voters: others.len() + 1,
        granted: 1,
    };
    let max = inner.config.frame_bytes_max as usize;
    let request = RpcRequest::PreVote(PreVoteRequest { candidate: me });
    let mut calls = JoinSet::new();
    for (peer, addr) in others {
        let transport = inner.transport.clone();
        let request = request.clone();
        calls.spawn(async move {
            let call = request.call(&*transport, me, peer, &addr, max);
            matches!(
                tokio::time::timeout(limit, call).await,
                Ok(Ok(RpcResponse::PreVote(PreVoteResponse { granted: true })))
            )
        });
    }
    while !round.won() {
        match calls.join_next().await {
            Some(Ok(true)) => round.granted += 1,
            Some(_) => {}
            None => break,
        }
    }
    if !round.won() {
        inner
            .election
            .prevotes_refused
            .fetch_add(1, Ordering::Relaxed);
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_voter_grants_only_when_it_has_heard_no_leader_for_the_quiet_bound() {
        let t0 = Instant::now();
        let quiet = Duration::from_millis(200);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert!(!grants(at(199), false, t0, quiet), "a leader spoke lately");
        assert!(grants(at(200), false, t0, quiet));
        assert!(
            !grants(at(10_000), true, t0, quiet),
            "a leader never grants"
        );
        // A contact after `now` (a clock sample taken earlier) is no reason to grant.
        assert!(!grants(t0, false, at(5), quiet));
    }

    #[test]
    fn a_majority_counts_this_member() {
        let r = |voters, granted| Round { voters, granted }.won();
        assert!(r(1, 1), "alone, it is its own majority");
        assert!(!r(3, 1));
        assert!(r(3, 2));
        assert!(!r(4, 2), "half is not a majority");
        assert!(r(5, 3));
    }

    /// A follower cut off from the leader (both ways) while the third member still hears it
    /// asks for pre-votes, is refused, and never raises its term; once the cut heals the
    /// leader still leads at its term. Without pre-votes the cut member campaigned and its
    /// higher term unseated the leader at the heal.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_cut_off_from_a_leader_the_others_hear_does_not_unseat_it() {
        use crate::preappend_tests::{cluster, LIMIT};

        let dir = tempfile::tempdir().unwrap();
        let (c, leader, followers) = cluster(dir.path(), true).await;
        let term = c.member(leader).metrics().current_term;
        let cut = followers[0];
        c.router().block_link(leader, cut);
        c.router().block_link(cut, leader);
        // Past three leases (1.2 s in the test config) and their campaign spacing.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(
            c.member(cut).metrics().current_term,
            term,
            "the cut member never stood"
        );
        assert!(
            c.member(cut).prevotes_refused() >= 1,
            "it asked and was refused"
        );
        assert_eq!(c.member(followers[1]).metrics().current_term, term);
        c.router().heal();
        c.member(leader).join(NodeId(50)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let all = [NodeId(1), NodeId(2), NodeId(3)];
        let now = c.wait_for_leader(&all, LIMIT).await.unwrap();
        assert_eq!((now, c.member(now).metrics().current_term), (leader, term));
        c.shutdown().await.unwrap();
    }

    /// With the leader stopped, the two others grant each other pre-votes and elect.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_leader_is_replaced_through_pre_votes() {
        use crate::preappend_tests::{cluster, LIMIT};

        let dir = tempfile::tempdir().unwrap();
        let (mut c, leader, followers) = cluster(dir.path(), true).await;
        let term = c.member(leader).metrics().current_term;
        c.stop_member(leader).await.unwrap();
        let next = c.wait_for_leader(&followers, LIMIT).await.unwrap();
        assert_ne!(next, leader);
        assert!(c.member(next).metrics().current_term > term);
        assert!(c.member(next).prompt_elections() >= 1, "the watchdog stood");
        c.shutdown().await.unwrap();
    }
}
