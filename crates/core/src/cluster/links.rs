//! What `POST /v1/route` asks of the cluster side: the live members to rank, each block's
//! holders with their tiers from the local directory replica, and node-to-node bandwidths
//! kept fresh within [`LINKS_MAX_AGE_MS`] (peers' reports are asked for on demand, over the
//! control channel's `Usage` exchange, bounded as `GET /v1/cluster` bounds it).

use std::time::{Duration, Instant};

use kvfabric_store::{BlockId, Tier};

use super::Cluster;
use crate::ids::NodeId;

/// Oldest a peer's bandwidth report may be before a route asks for a new one.
pub(crate) const LINKS_MAX_AGE_MS: u64 = 2_000;

impl Cluster {
    /// Every member whose lease is current here, by id.
    pub(crate) fn live_members(&self) -> Vec<NodeId> {
        let now_ms = self.clock.now_ms();
        let mut ids: Vec<NodeId> = self
            .members()
            .iter()
            .map(|m| m.id)
            .filter(|id| self.is_live(*id, now_ms))
            .collect();
        ids.sort();
        ids
    }

    /// The live holders of the block of directory key `key` ([`super::directory_block`]) and
    /// the tiers they hold it in (one entry per node and tier).
    pub(crate) fn live_holders(&self, key: &BlockId) -> Vec<(NodeId, Tier)> {
        let now_ms = self.clock.now_ms();
        let mut out: Vec<(NodeId, Tier)> = self
            .directory
            .view()
            .read(|s| s.owners(key))
            .into_iter()
            .map(|o| (NodeId(o.node.0), o.tier))
            .filter(|(n, _)| self.is_live(*n, now_ms))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Asks the live peers for their bandwidth reports when one is missing or older than
    /// [`LINKS_MAX_AGE_MS`].
    pub(crate) async fn refresh_links(&self, live: &[NodeId]) {
        let max_age = Duration::from_millis(LINKS_MAX_AGE_MS);
        if self.bandwidth.stale(live, max_age, Instant::now()) {
            self.peer_tiers().await;
        }
    }
}
