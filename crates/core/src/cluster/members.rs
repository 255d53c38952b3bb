//! Who the members are now: the Raft membership of the directory (voters and learners, as
//! this node's replica has it), each with its addresses.
//!
//! The Raft membership is the one source of truth for who belongs: it is replicated, it
//! persists in the log and snapshots, and it changes one step at a time (`reconfig`). The
//! membership entries carry only the address Raft dials (the member's message endpoint: its
//! block transport's address with QUIC blocks, its `raft` address with UCX); a member's other
//! addresses (its HTTP API and block transport) come from this node's `[[cluster.members]]` when the member is
//! listed there, and otherwise are asked of the member itself (`Describe` on the control
//! channel, authenticated by its certificate) and remembered in [`Learned`]. Until the Raft
//! membership is known (a fresh member before its first log entry) the configured members
//! stand in for it.
//!
//! Placement, repair, reads and the views all take their members from here, so a member added
//! at run time is a target once it votes and a member removed is gone from every view.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kvfabric_transport::PeerAddr;

use super::control::{decode, encode, ControlRequest, ControlResponse};
use super::net::CONTROL_CHANNEL;
use super::Cluster;
use crate::config::Member;
use crate::ids::NodeId;

/// Pause between two looks for members whose addresses are not known yet.
pub(crate) const DISCOVER_MS: u64 = 500;
/// Bound on asking one member for its addresses.
pub(crate) const DESCRIBE_TIMEOUT_MS: u64 = 2_000;

/// Addresses of members not in this node's config, as they described themselves.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    members: RwLock<BTreeMap<NodeId, Member>>,
}

impl Learned {
    fn get(&self, id: NodeId) -> Option<Member> {
        self.members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    pub(crate) fn insert(&self, m: Member) {
        self.members
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(m.id, m);
    }
}

/// The Raft membership as this replica has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftMembers {
    /// Voters, by id.
    pub voters: Vec<NodeId>,
    /// Learners, by id.
    pub learners: Vec<NodeId>,
    /// The address Raft dials each of them at.
    pub addrs: BTreeMap<NodeId, String>,
}

impl RaftMembers {
    /// Voters and learners, by id.
    pub fn all(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.voters.iter().chain(&self.learners).copied().collect();
        v.sort();
        v.dedup();
        v
    }

    /// Whether `id` votes.
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id)
    }
}

impl Cluster {
    /// The Raft membership this replica has seen (empty before the first log entry).
    pub(crate) fn raft_members(&self) -> RaftMembers {
        let m = self.directory.metrics();
        let mem = m.membership_config.membership();
        let mut voters: Vec<NodeId> = mem.voter_ids().map(|n| NodeId(n.0)).collect();
        let mut learners: Vec<NodeId> = mem.learner_ids().map(|n| NodeId(n.0)).collect();
        voters.sort();
        learners.sort();
        let addrs = mem
            .nodes()
            .map(|(id, node)| (NodeId(id.0), node.addr.clone()))
            .collect();
        RaftMembers {
            voters,
            learners,
            addrs,
        }
    }

    /// Member `id`'s addresses: configured, or as it described itself.
    pub(crate) fn member(&self, id: NodeId) -> Option<Member> {
        self.config
            .member(id)
            .cloned()
            .or_else(|| self.learned.get(id))
    }

    /// The current members with known addresses, by id: the Raft membership's voters and
    /// learners (the configured members while it is still unknown).
    pub(crate) fn members(&self) -> Vec<Member> {
        let raft = self.raft_members();
        if raft.addrs.is_empty() {
            return self.config.members.clone();
        }
        raft.all()
            .into_iter()
            .filter_map(|id| self.member(id))
            .collect()
    }

    /// The members that vote, by id (the configured members while the membership is unknown):
    /// the only ones new copies are placed on.
    pub(crate) fn voters(&self) -> Vec<NodeId> {
        let raft = self.raft_members();
        if raft.addrs.is_empty() {
            return self.config.members.iter().map(|m| m.id).collect();
        }
        raft.voters
    }

    /// This node's own member entry (a node's config always lists it).
    pub(crate) fn me_member(&self) -> Option<Member> {
        self.config.member(self.me).cloned()
    }

    /// Asks members of the Raft membership whose addresses are unknown here to describe
    /// themselves, and remembers the answers.
    pub(crate) async fn discover(&self) {
        let raft = self.raft_members();
        for (id, addr) in raft.addrs {
            if id == self.me || self.member(id).is_some() {
                continue;
            }
            match self.describe(id, &addr).await {
                Ok(d) => {
                    tracing::info!(node = %id, api = %d.member.api, "learned a member's addresses");
                    self.learned.insert(d.member);
                }
                Err(reason) => {
                    tracing::debug!(node = %id, %addr, %reason, "member not described yet")
                }
            }
        }
    }

    /// Member `id`'s description of itself, asked at Raft address `addr`.
    pub(crate) async fn describe(&self, id: NodeId, addr: &str) -> Result<Described, String> {
        let sock: SocketAddr = addr
            .parse()
            .map_err(|_| format!("expected IP:PORT, found {addr:?}"))?;
        let limit = Duration::from_millis(DESCRIBE_TIMEOUT_MS);
        let r = self
            .control(id, sock, &ControlRequest::Describe, limit)
            .await?;
        match r {
            ControlResponse::Member {
                id: got,
                api,
                transport,
                raft,
                ready,
            } if got == id.0 => Ok(Described {
                member: Member {
                    id,
                    api,
                    transport,
                    raft,
                },
                ready,
            }),
            other => Err(format!("expected n{}'s description, found {other:?}", id.0)),
        }
    }
}

impl Cluster {
    /// One control request to member `id`, reached at `addr` (its message endpoint: what the
    /// Raft membership records, the block transport's address with QUIC blocks), within
    /// `limit`: the one place the cluster side asks members things on the control channel.
    pub(crate) async fn control(
        &self,
        id: NodeId,
        addr: SocketAddr,
        req: &ControlRequest,
        limit: Duration,
    ) -> Result<ControlResponse, String> {
        let peer = PeerAddr::new(format!("node{}", id.0), addr);
        let answer = self
            .messenger
            .call(CONTROL_CHANNEL, &peer, encode(req), limit)
            .await
            .map_err(|e| e.to_string())?;
        decode(&answer, "a control answer").map_err(|e| e.to_string())
    }
}

/// What a member said of itself.
#[derive(Debug, Clone)]
pub(crate) struct Described {
    /// Its addresses.
    pub(crate) member: Member,
    /// Whether it is ready (joined, caught up with its own join, its blocks registered).
    pub(crate) ready: bool,
}

/// Looks for undescribed members every [`DISCOVER_MS`], for the life of the node.
pub(crate) async fn run(cluster: Arc<Cluster>) {
    loop {
        cluster.discover().await;
        tokio::time::sleep(Duration::from_millis(DISCOVER_MS)).await;
    }
}
