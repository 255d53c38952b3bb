//! What the fabric shows of itself: the cluster as this node sees it (members, roles, health,
//! tiers, counters, leader, term, measured links), readiness, the numbers behind the
//! metrics, and its directory replica's digest (for checks that members agree).

use super::Fabric;
use crate::cluster::bandwidth::LinkView;
use crate::cluster::stats::MemberStats;
use crate::cluster::view::{ClusterMetrics, NotReady};
use crate::error::FabricError;
use crate::ids::NodeId;
use crate::local::Snapshot;
pub use kvfabric_directory::storage::StateDigest;

/// The Raft term a node reports before it has a directory.
const TERM_STANDALONE: u64 = 0;
/// The role of a node that is the whole cluster.
const ROLE_STANDALONE: &str = "standalone";

/// One tier of a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierInfo {
    /// Tier name.
    pub tier: String,
    /// Bytes it may hold.
    pub capacity: u64,
    /// Bytes it holds.
    pub used: u64,
    /// Blocks it holds.
    pub blocks: u64,
}

/// One member as this node sees it.
#[derive(Debug, Clone)]
pub struct MemberInfo {
    /// Its id.
    pub id: NodeId,
    /// Its HTTP API.
    pub api: String,
    /// `leader`, `follower`, `learner`, `unknown`, or `standalone`.
    pub role: &'static str,
    /// Its tiers (none for a member that did not answer in time).
    pub tiers: Vec<TierInfo>,
    /// Its lease is current here (a standalone node: its store is open).
    pub healthy: bool,
    /// Its counters (none for a member that did not answer in time).
    pub stats: Option<MemberStats>,
}

/// The cluster as this node sees it.
#[derive(Debug, Clone)]
pub struct ClusterInfo {
    /// Every configured member, by id.
    pub members: Vec<MemberInfo>,
    /// The leader known here.
    pub leader: Option<NodeId>,
    /// The Raft term (0 standalone).
    pub term: u64,
    /// Measured node-to-node links (empty standalone).
    pub links: Vec<LinkView>,
}

impl Fabric {
    /// This node's counters, tier use and index sizes.
    pub fn snapshot(&self) -> Result<Snapshot, FabricError> {
        Ok(self.local.snapshot()?)
    }

    /// Members with roles, health and tiers (the other members' asked of them, bounded), the
    /// leader, the term and the measured links; a standalone node is its own only member.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, FabricError> {
        let snapshot = self.snapshot()?;
        let mut mine = tier_infos(&snapshot);
        let my_stats = MemberStats::of(
            &snapshot,
            self.local.reads_not_found(),
            self.cluster
                .as_ref()
                .map(|c| c.transport.counters())
                .as_ref(),
        );
        let Some(c) = &self.cluster else {
            return Ok(ClusterInfo {
                members: vec![MemberInfo {
                    id: self.me,
                    api: self.api.clone(),
                    role: ROLE_STANDALONE,
                    tiers: mine,
                    healthy: true,
                    stats: Some(my_stats),
                }],
                leader: Some(self.me),
                term: TERM_STANDALONE,
                links: Vec::new(),
            });
        };
        let view = c.view();
        let mut peers = c.peer_tiers().await;
        let members = view
            .members
            .into_iter()
            .map(|m| {
                let (tiers, stats) = if m.id == self.me {
                    (std::mem::take(&mut mine), Some(my_stats))
                } else {
                    let p = peers.remove(&m.id).unwrap_or_default();
                    let tiers = p
                        .tiers
                        .into_iter()
                        .map(|t| TierInfo {
                            tier: t.tier,
                            capacity: t.capacity,
                            used: t.used,
                            blocks: t.blocks,
                        })
                        .collect();
                    (tiers, p.stats)
                };
                MemberInfo {
                    tiers,
                    stats,
                    id: m.id,
                    api: m.api,
                    role: m.role,
                    healthy: m.healthy,
                }
            })
            .collect();
        Ok(ClusterInfo {
            members,
            leader: view.leader,
            term: view.term,
            links: c.bandwidth.links(),
        })
    }

    /// `Ok` on a standalone node; on a member, once joined, with a leader known and this
    /// replica caught up with its own join.
    pub fn ready(&self) -> Result<(), NotReady> {
        match &self.cluster {
            Some(c) => c.ready(),
            None => Ok(()),
        }
    }

    /// Raft, transport, repair and tier-sync numbers (members only).
    pub fn cluster_metrics(&self) -> Option<ClusterMetrics> {
        self.cluster.as_ref().map(|c| c.metrics())
    }

    /// The measured node-to-node links (empty standalone).
    pub fn links(&self) -> Vec<LinkView> {
        self.cluster
            .as_ref()
            .map(|c| c.bandwidth.links())
            .unwrap_or_default()
    }

    /// This member's directory replica in 32 bytes, with the last log id it applied
    /// ([`StateDigest`]): members at one id must hold one digest. Clones the replica's state,
    /// so a caller with a large directory runs it off the async workers. A standalone node has
    /// no directory: [`FabricError::DirectoryUnavailable`].
    pub fn directory_digest(&self) -> Result<StateDigest, FabricError> {
        let cluster = self.cluster.as_ref().ok_or_else(|| {
            FabricError::DirectoryUnavailable("a standalone node has no directory".into())
        })?;
        cluster
            .directory
            .view()
            .digest()
            .map_err(|e| FabricError::DirectoryUnavailable(format!("digesting the replica: {e}")))
    }
}

/// This node's tiers from its snapshot.
pub fn tier_infos(snapshot: &Snapshot) -> Vec<TierInfo> {
    snapshot
        .usage
        .iter()
        .map(|u| TierInfo {
            tier: u.tier.name().to_owned(),
            capacity: u.capacity.0,
            used: u.used.0,
            blocks: u.blocks,
        })
        .collect()
}

/// A standalone node's view before its store is open: itself, not healthy, no tiers.
pub fn opening(me: NodeId, api: &str) -> ClusterInfo {
    ClusterInfo {
        members: vec![MemberInfo {
            id: me,
            api: api.to_owned(),
            role: ROLE_STANDALONE,
            tiers: Vec::new(),
            healthy: false,
            stats: None,
        }],
        leader: Some(me),
        term: TERM_STANDALONE,
        links: Vec::new(),
    }
}
