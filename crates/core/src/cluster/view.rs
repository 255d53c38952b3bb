//! What the HTTP API shows of the cluster: members with roles and health, the leader and the
//! term (`GET /v1/cluster`), readiness (`GET /readyz`), and the Raft and transport numbers
//! (`GET /metrics`). Everything here reads local state, except the other members' tiers,
//! which are asked of the live members over the control channel, all at once, each bounded
//! by [`PEER_USAGE_TIMEOUT_MS`] (a member that does not answer shows no tiers).

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::JoinSet;

use super::control::{decode, encode, ControlRequest, ControlResponse, TierUsageView};
use super::net::CONTROL_CHANNEL;

/// Bound on asking one member for its tiers.
pub const PEER_USAGE_TIMEOUT_MS: u64 = 1_000;

use std::sync::atomic::Ordering;

use kvfabric_directory::NodeId as DirNodeId;
use kvfabric_transport::CountersSnapshot;

use super::Cluster;
use crate::ids::NodeId;

/// What another member reported of itself.
#[derive(Debug, Clone, Default)]
pub struct PeerUsage {
    /// Its tiers.
    pub tiers: Vec<TierUsageView>,
    /// Its counters (absent from a member that predates them).
    pub stats: Option<super::stats::MemberStats>,
}

/// One member as this node sees it.
#[derive(Debug, Clone)]
pub struct MemberView {
    /// Its id.
    pub id: NodeId,
    /// Its HTTP API.
    pub api: String,
    /// `leader`, `follower`, `learner`, or `unknown` (not in the Raft membership seen here).
    pub role: &'static str,
    /// Its lease is current in this node's replica of the directory.
    pub healthy: bool,
}

/// The cluster as this node sees it.
#[derive(Debug, Clone)]
pub struct ClusterView {
    /// Every member (the Raft membership's voters and learners), by id.
    pub members: Vec<MemberView>,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// The Raft term.
    pub term: u64,
}

/// Why the node is not ready yet, if it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// No epoch yet: the join has not committed.
    NotJoined,
    /// No leader known.
    NoLeader,
    /// This node's replica has not applied its own join yet, or the blocks it held at start
    /// are not registered yet.
    CatchingUp,
}

impl NotReady {
    /// A short reason for the 503.
    pub fn reason(self) -> &'static str {
        match self {
            NotReady::NotJoined => "not joined to the directory yet",
            NotReady::NoLeader => "the directory has no leader",
            NotReady::CatchingUp => "the directory replica is catching up",
        }
    }
}

/// Raft and transport numbers for `/metrics`.
#[derive(Debug, Clone)]
pub struct ClusterMetrics {
    /// Current term.
    pub term: u64,
    /// 1 when this node is the leader.
    pub is_leader: bool,
    /// Index of the last applied entry.
    pub last_applied: u64,
    /// Index of the last log entry.
    pub last_log: u64,
    /// This node's epoch (0 before joining).
    pub epoch: u64,
    /// Members whose lease is current here.
    pub members_healthy: u64,
    /// Members this node knows of (the Raft membership's voters and learners).
    pub members: u64,
    /// Raft RPCs that got a response / failed.
    pub raft_calls_ok: u64,
    /// Raft RPCs that failed.
    pub raft_calls_failed: u64,
    /// Raft RPCs dropped by their caller's deadline before they ended (see
    /// `RaftNetCounters::calls_abandoned`).
    pub raft_calls_abandoned: u64,
    /// Raft RPC streams served.
    pub raft_served: u64,
    /// Elections this member started promptly, its leader silent for the lease.
    pub prompt_elections: u64,
    /// Rounds of pre-votes this member asked for that a majority refused (the others still
    /// heard a leader).
    pub prevotes_refused: u64,
    /// Early replication while this member led: pre-appends accepted, refused, failed, dropped,
    /// and openraft requests sent without the entries they carried (see
    /// `kvfabric_directory::preappend`).
    pub preappends: [u64; 5],
    /// The block transport's counters.
    pub transport: CountersSnapshot,
    /// Re-replication: passes, blocks under-replicated in the last pass, copies made, copies
    /// asked for and not made.
    pub repair: [u64; 4],
    /// Tier moves (and lost copies) recorded in the directory, failed, seen before joining;
    /// lost copies whose owner records were released.
    pub tier_moves: [u64; 4],
    /// Peer health: members suspected now, times one became a suspect, times a suspect
    /// answered again, probes sent.
    pub health: [u64; 4],
    /// Engine identities offered ahead of pushes (`offers`): offered to a peer that kept
    /// them, not taken by the peer, and pushed copies installed here with an offered one.
    pub engine_offers: [u64; 3],
}

impl Cluster {
    /// Whether `id`'s lease is current in this node's replica at `now_ms`.
    pub(crate) fn is_live(&self, id: NodeId, now_ms: u64) -> bool {
        self.directory
            .view()
            .read(|s| crate::decide::liveness::is_live(s.node(id).as_ref(), now_ms))
    }

    /// The tiers (and counters) of the other live members, by id (those that answered in
    /// time); their bandwidth reports go to the bandwidth table.
    pub(crate) async fn peer_tiers(&self) -> HashMap<NodeId, PeerUsage> {
        let now_ms = self.clock.now_ms();
        let limit = Duration::from_millis(PEER_USAGE_TIMEOUT_MS);
        let mut calls = JoinSet::new();
        for m in &self.members() {
            if m.id == self.me || !self.is_live(m.id, now_ms) {
                continue;
            }
            let Some(peer) = self.message_peer(m.id) else {
                continue;
            };
            let (messenger, id) = (self.messenger.clone(), m.id);
            calls.spawn(async move {
                let request = encode(&ControlRequest::Usage);
                let answer = messenger.call(CONTROL_CHANNEL, &peer, request, limit).await;
                (id, answer)
            });
        }
        let mut out = HashMap::new();
        while let Some(joined) = calls.join_next().await {
            let Ok((id, Ok(bytes))) = joined else {
                continue;
            };
            if let Ok(ControlResponse::Usage {
                tiers,
                inbound,
                stats,
            }) = decode(&bytes, "a usage answer")
            {
                self.bandwidth
                    .update_peer(id, inbound, std::time::Instant::now());
                out.insert(id, PeerUsage { tiers, stats });
            }
        }
        out
    }

    /// Members, roles, health, leader, term.
    pub(crate) fn view(&self) -> ClusterView {
        let metrics = self.directory.metrics();
        let membership = self.directory.membership();
        let leader = metrics.current_leader.map(|l| NodeId(l.0));
        let now_ms = self.clock.now_ms();
        let members = self
            .members()
            .iter()
            .map(|m| {
                let d = DirNodeId(m.id.0);
                let role = if leader == Some(m.id) {
                    "leader"
                } else if membership.voters.contains(&d) {
                    "follower"
                } else if membership.learners.contains(&d) {
                    "learner"
                } else {
                    "unknown"
                };
                MemberView {
                    id: m.id,
                    api: m.api.clone(),
                    role,
                    healthy: self.is_live(m.id, now_ms),
                }
            })
            .collect();
        ClusterView {
            members,
            leader,
            term: metrics.current_term,
        }
    }

    /// `Ok` once joined, with a leader known and this replica caught up with its own join.
    pub(crate) fn ready(&self) -> Result<(), NotReady> {
        let epoch = self.incarnation.epoch().ok_or(NotReady::NotJoined)?;
        self.directory.current_leader().ok_or(NotReady::NoLeader)?;
        let applied_own_join = self.directory.view().read(|s| {
            s.node(DirNodeId(self.me.0))
                .is_some_and(|r| r.epoch == epoch)
        });
        if !applied_own_join || !self.incarnation.registered() {
            return Err(NotReady::CatchingUp);
        }
        Ok(())
    }

    /// The numbers for `/metrics`.
    pub(crate) fn metrics(&self) -> ClusterMetrics {
        let members = self.members();
        let m = self.directory.metrics();
        let now_ms = self.clock.now_ms();
        let c = &self.raft_counters;
        ClusterMetrics {
            term: m.current_term,
            is_leader: m.current_leader == Some(DirNodeId(self.me.0)),
            last_applied: m.last_applied.map_or(0, |l| l.index),
            last_log: m.last_log_index.unwrap_or(0),
            epoch: self.incarnation.epoch().map_or(0, |e| e.0),
            members_healthy: members
                .iter()
                .filter(|mm| self.is_live(mm.id, now_ms))
                .count() as u64,
            members: members.len() as u64,
            raft_calls_ok: c.calls_ok.load(Ordering::Relaxed),
            raft_calls_failed: c.calls_failed.load(Ordering::Relaxed),
            raft_calls_abandoned: c.calls_abandoned.load(Ordering::Relaxed),
            raft_served: c.served.load(Ordering::Relaxed),
            prompt_elections: self.directory.prompt_elections(),
            prevotes_refused: self.directory.prevotes_refused(),
            preappends: {
                let p = self.directory.preappends();
                [p.accepted, p.refused, p.failed, p.dropped, p.elided]
            },
            transport: self.transport.counters(),
            repair: [
                self.repair.passes.load(Ordering::Relaxed),
                self.repair.under_replicated.load(Ordering::Relaxed),
                self.repair.copies_made.load(Ordering::Relaxed),
                self.repair.copies_missing.load(Ordering::Relaxed),
            ],
            engine_offers: [
                self.offers.sent.load(Ordering::Relaxed),
                self.offers.failed.load(Ordering::Relaxed),
                self.offers.used.load(Ordering::Relaxed),
            ],
            health: [
                self.health.suspects().len() as u64,
                self.health.counters.suspected.load(Ordering::Relaxed),
                self.health.counters.cleared.load(Ordering::Relaxed),
                self.health.counters.probes.load(Ordering::Relaxed),
            ],
            tier_moves: [
                self.tier_sync.recorded.load(Ordering::Relaxed),
                self.tier_sync.failed.load(Ordering::Relaxed),
                self.tier_sync.before_join.load(Ordering::Relaxed),
                self.tier_sync.lost_released.load(Ordering::Relaxed),
            ],
        }
    }
}
