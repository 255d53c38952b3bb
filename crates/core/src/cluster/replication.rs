//! Replication of a put: the node that sealed a block asks `replication − 1` other members to
//! take verified copies, and the put is acknowledged with the number of copies that exist.
//!
//! Peers are chosen deterministically among the voters whose lease is current, in the
//! rendezvous order of [`crate::decide::placement`] (learners, joining or leaving, take no
//! new copies; a put a learner takes itself waits for `replication` copies on voters). A peer that fails is replaced by the next in
//! that order. Each peer (`control_server`, behind the control channel) fetches the block from
//! the sealing node over the block transport (verified as it arrives), installs it,
//! registers itself as an owner under its epoch, and only then answers. The whole wait is
//! bounded by [`REPLICATE_TIMEOUT_MS`]; copies that did not answer by then are not counted.

use std::time::Duration;

use kvfabric_directory::NodeId as DirNodeId;
use kvfabric_store::{BlockId, NamespaceKey};
use tokio::task::JoinSet;

use super::control::{ControlRequest, ControlResponse};
use super::Cluster;
use crate::config::Member;
use crate::decide::placement::replica_order;

/// Bound on waiting for the copies of one put.
pub(crate) const REPLICATE_TIMEOUT_MS: u64 = 15_000;

/// What a put's replication achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    /// Verified copies that exist, this node's included.
    pub(crate) have: u32,
    /// Copies asked for (the replication factor).
    pub(crate) want: u32,
}

impl Cluster {
    /// The voters other than this one whose lease is current, best peer for `id` first
    /// (learners take no new copies: they are joining, or leaving).
    fn replica_order(&self, id: &BlockId) -> Vec<Member> {
        let now_ms = self.clock.now_ms();
        let ids = self.voters();
        replica_order(id, self.me, &ids, |m| self.is_live(m, now_ms))
            .into_iter()
            .filter_map(|m| self.member(m))
            .collect()
    }

    /// Asks peers for copies of `(ns, id)` until `replication − 1` answered with a verified,
    /// registered copy, the candidates ran out, or [`REPLICATE_TIMEOUT_MS`] passed.
    pub(crate) async fn replicate(&self, ns: NamespaceKey, id: BlockId) -> Replicas {
        let want = self.config.replication;
        #[cfg(feature = "planted-bugs")]
        if kvfabric_transport::planted::active("early-ack") {
            // Planted bug (chaos harness): acknowledge every copy before any exists.
            return Replicas { have: want, want };
        }
        // A learner's own copy does not count: it is joining or leaving, and a leaving
        // member's copy goes with it.
        let mine = u32::from(self.voters().contains(&self.me));
        let need = want.saturating_sub(mine) as usize;
        let copies = self.copy_to_peers(ns, id, need, &[]).await;
        Replicas {
            have: mine + copies as u32,
            want,
        }
    }

    /// Asks live peers other than `exclude`, best first for `id`, for verified copies of
    /// `(ns, id)` taken from this node, until `need` answered, the candidates ran out, or
    /// [`REPLICATE_TIMEOUT_MS`] passed; returns the copies made.
    pub(crate) async fn copy_to_peers(
        &self,
        ns: NamespaceKey,
        id: BlockId,
        need: usize,
        exclude: &[crate::ids::NodeId],
    ) -> usize {
        let mut candidates = self
            .replica_order(&id)
            .into_iter()
            .filter(|m| !exclude.contains(&m.id));
        let mut calls = JoinSet::new();
        let limit = Duration::from_millis(REPLICATE_TIMEOUT_MS);
        let deadline = tokio::time::Instant::now() + limit;
        let req = ControlRequest::Replicate {
            from: self.me.0,
            namespace: ns,
            block: id,
        };
        let mut copies = 0usize;
        let spawn = |calls: &mut JoinSet<_>, m: Member| {
            let net = self.raft_net.clone();
            let req = req.clone();
            calls.spawn(async move {
                let r = net
                    .control_call(DirNodeId(m.id.0), m.raft, &req, limit)
                    .await;
                (m.id, r)
            });
        };
        for m in candidates.by_ref().take(need) {
            spawn(&mut calls, m);
        }
        while copies < need {
            let next = tokio::time::timeout_at(deadline, calls.join_next()).await;
            let Ok(Some(joined)) = next else { break };
            match joined {
                Ok((_, Ok(ControlResponse::Replicated { .. }))) => copies += 1,
                Ok((peer, outcome)) => {
                    tracing::warn!(%peer, block = %id, ?outcome, "a replica was not taken; trying the next member");
                    if let Some(m) = candidates.next() {
                        spawn(&mut calls, m);
                    }
                }
                Err(e) => tracing::error!(error = %e, "a replication task failed"),
            }
        }
        calls.abort_all();
        copies
    }
}

impl Cluster {
    /// Records a sealed put in the directory: one claim per chunk key (the first carries no
    /// key when none was given), in flight together so that they can share a batch.
    pub(crate) async fn claim_put(
        &self,
        ns: NamespaceKey,
        id: BlockId,
        tier: kvfabric_store::Tier,
        chunk_keys: &[crate::ids::ChunkKey],
    ) -> Result<(), crate::error::FabricError> {
        let unavailable = |m: String| crate::error::FabricError::DirectoryUnavailable(m);
        let batcher = self
            .incarnation
            .batcher()
            .ok_or_else(|| unavailable("this node has not joined the directory yet".into()))?;
        let chunk = |i: usize| {
            chunk_keys
                .get(i)
                .map(|k| super::directory_chunk_key(&ns, *k))
        };
        let key = super::directory_block(&ns, id);
        let second = async {
            match chunk(1) {
                Some(c) => batcher.claim(key, tier, Some(c)).await.map(|_| ()),
                None => Ok(()),
            }
        };
        let (first, second) = tokio::join!(batcher.claim(key, tier, chunk(0)), second);
        first
            .map(|_| ())
            .and(second)
            .map_err(|e| unavailable(e.to_string()))
    }
}

impl Cluster {
    /// Releases this node's ownership record of `(ns, id)` in `tier` (the reference is gone
    /// either way; a release that does not commit is purged with the lease).
    pub(crate) async fn release(&self, ns: NamespaceKey, id: BlockId, tier: kvfabric_store::Tier) {
        if let Some(b) = self.incarnation.batcher() {
            if let Err(e) = b.release(super::directory_block(&ns, id), tier).await {
                tracing::warn!(block = %id, error = %e, "releasing ownership failed");
            }
        }
    }
}
