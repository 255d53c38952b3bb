//! Replication of a put: the node that sealed a block pushes it to `replication − 1` other
//! members, and the put is acknowledged with the number of copies that exist.
//!
//! Peers are chosen deterministically among the voters whose lease is current, in the
//! rendezvous order of [`crate::decide::placement`], members this node suspects dead last
//! (learners, joining or leaving, take no new copies; a put a learner takes itself waits for
//! `replication` copies on voters). A peer that fails is replaced by the next in that order
//! at once, one that is silent until it is suspected (`failover.suspect_ms`, never sooner
//! than `failover.hedge_ms`) gets the next beside it, and each push is bounded by
//! `failover.attempt_ms`. Pushes are hedged later than reads: a push answers only once the
//! copy is installed and registered (a directory commit), which under load often takes longer
//! than `hedge_ms`, and a spare push that lands is an extra copy, where a spare read costs
//! only the bytes. Each push is one round trip on the block transport: the peer receives the
//! bytes through the same streaming receiver as a fetch (hashed as they land, refused if they
//! do not match the id), installs the copy, registers itself as an owner under its epoch
//! (`source`), and only then answers. The whole wait is bounded by [`REPLICATE_TIMEOUT_MS`];
//! copies that did not answer by then are not counted.

use std::sync::Arc;
use std::time::Duration;

use kvfabric_store::{BlockId, NamespaceKey};

use super::{attempt, Cluster};
use crate::config::Member;
use crate::decide::placement::replica_order;

/// Bound on waiting for the copies of one put.
pub(crate) const REPLICATE_TIMEOUT_MS: u64 = 15_000;

/// What a put's replication achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replicas {
    /// Verified copies that exist, this node's included.
    pub(crate) have: u32,
    /// Copies asked for (the replication factor).
    pub(crate) want: u32,
    /// The members that answered `Stored` (this node not included).
    pub(crate) holders: Vec<crate::ids::NodeId>,
}

impl Cluster {
    /// The voters other than this one whose lease is current, best target for `id` first:
    /// those this node does not suspect, then the suspects (a last resort). Learners take no
    /// new copies: they are joining, or leaving.
    fn replica_order(&self, id: &BlockId) -> Vec<Member> {
        let now_ms = self.clock.now_ms();
        let ids = self.voters();
        let live = |m| self.is_live(m, now_ms);
        let suspect = |m| self.health.is_suspect(m);
        let trusted = replica_order(id, self.me, &ids, |m| live(m) && !suspect(m));
        let suspects = replica_order(id, self.me, &ids, |m| live(m) && suspect(m));
        trusted
            .into_iter()
            .chain(suspects)
            .filter_map(|m| self.member(m))
            .collect()
    }

    /// Pushes copies of `(ns, id)` until `replication − 1` answered with a verified,
    /// registered copy, the candidates ran out, or [`REPLICATE_TIMEOUT_MS`] passed.
    pub(crate) async fn replicate(self: &Arc<Self>, ns: NamespaceKey, id: BlockId) -> Replicas {
        let want = self.config.replication;
        #[cfg(feature = "planted-bugs")]
        if kvfabric_transport::planted::active("early-ack") {
            // Planted bug (chaos harness): acknowledge every copy before any exists.
            // It names the members a put would have copied to, as an honest one would.
            let need = want.saturating_sub(1) as usize;
            let holders = self.replica_order(&id).into_iter().take(need).map(|m| m.id);
            return Replicas {
                have: want,
                want,
                holders: holders.collect(),
            };
        }
        // A learner's own copy does not count: it is joining or leaving, and a leaving
        // member's copy goes with it.
        let mine = u32::from(self.voters().contains(&self.me));
        let need = want.saturating_sub(mine) as usize;
        let holders = self.copy_to_peers(ns, id, need, &[]).await;
        Replicas {
            have: mine + holders.len() as u32,
            want,
            holders,
        }
    }

    /// Pushes verified copies of `(ns, id)`, read from this node's store, to live members
    /// other than `exclude`, in [`Cluster::replica_order`], until `need` answered `Stored`, the
    /// candidates ran out, or [`REPLICATE_TIMEOUT_MS`] passed; returns the members that took a
    /// copy. Each
    /// push is bounded by `failover.attempt_ms`; one that fails is replaced at once, one
    /// silent until suspected gets company (`attempt`); each outcome feeds peer
    /// health, so a member that did not answer is left out of the next put's placement.
    pub(crate) async fn copy_to_peers(
        self: &Arc<Self>,
        ns: NamespaceKey,
        id: BlockId,
        need: usize,
        exclude: &[crate::ids::NodeId],
    ) -> Vec<crate::ids::NodeId> {
        if need == 0 {
            return Vec::new();
        }
        let block = match self.local.get(&[ns], &id) {
            Ok(Some(b)) => Arc::new(b),
            Ok(None) => {
                tracing::warn!(block = %id, "no local copy to replicate (deleted meanwhile)");
                return Vec::new();
            }
            Err(e) => {
                tracing::warn!(block = %id, error = %e, "reading the block to replicate");
                return Vec::new();
            }
        };
        let candidates: Vec<Member> = self
            .replica_order(&id)
            .into_iter()
            .filter(|m| !exclude.contains(&m.id))
            .collect();
        // The push frame carries bytes only: an engine identity the block was put with is
        // offered on the control channel first (`offers`), within the same attempt.
        let engine = match self.local.info(&ns, &id) {
            Ok(Some(info)) => info.engine,
            _ => None,
        };
        let f = self.config.failover;
        let hedge = Duration::from_millis(f.hedge_ms.max(f.suspect_ms));
        let push = |m: Member| {
            let (cluster, block, engine) = (self.clone(), block.clone(), engine.clone());
            async move {
                let peer = super::block_peer(&m);
                let offered_then_pushed = async {
                    if let Some(engine) = &engine {
                        cluster.offer(&m, ns, id, engine).await;
                    }
                    cluster.transport.push(&peer, &block).await
                };
                let r = cluster.attempt(m.id, &peer, offered_then_pushed).await;
                if let Err(error) = &r {
                    tracing::warn!(peer = %m.id, block = %id, %error, "a copy was not taken");
                }
                r
            }
        };
        let gathered = attempt::until(candidates, need, hedge, push);
        let limit = Duration::from_millis(REPLICATE_TIMEOUT_MS);
        match tokio::time::timeout(limit, gathered).await {
            Ok(g) => {
                self.check_abandoned(g.abandoned.iter().map(|m| m.id).collect());
                g.won.into_iter().map(|(m, ())| m.id).collect()
            }
            Err(_) => {
                tracing::warn!(block = %id, "replication ran past its bound");
                Vec::new()
            }
        }
    }
}

impl Cluster {
    /// Records a sealed put in the directory: one claim per chunk key (the first carries no
    /// key when none was given), in flight together so that they can share a batch. A claim
    /// refused because this node's incarnation ended under it (its lease expired, or it
    /// joined again meanwhile) is made again, once, under the next incarnation: the node
    /// joins again by itself, and the block is held here all along.
    pub(crate) async fn claim_put(
        &self,
        ns: NamespaceKey,
        id: BlockId,
        tier: kvfabric_store::Tier,
        chunk_keys: &[crate::ids::ChunkKey],
    ) -> Result<(), crate::error::FabricError> {
        let unavailable = |m: String| crate::error::FabricError::DirectoryUnavailable(m);
        let (epoch, batcher) = self
            .incarnation
            .current()
            .ok_or_else(|| unavailable("this node has not joined the directory yet".into()))?;
        match self.claim_with(&batcher, ns, id, tier, chunk_keys).await {
            Err(e) if incarnation_ended(&e) => {
                let bound = Duration::from_millis(self.directory.config().lease_ms);
                tracing::info!(block = %id, error = %e, "a put's claim outlived this node's incarnation; claiming again under the next");
                let next = self
                    .incarnation
                    .next_after(epoch, bound)
                    .await
                    .ok_or_else(|| {
                        unavailable(format!(
                            "{e}; expected to join again within {} ms, found no new incarnation",
                            bound.as_millis()
                        ))
                    })?;
                self.claim_with(&next, ns, id, tier, chunk_keys)
                    .await
                    .map_err(|e| unavailable(e.to_string()))
            }
            r => r.map_err(|e| unavailable(e.to_string())),
        }
    }

    async fn claim_with(
        &self,
        batcher: &kvfabric_directory::Batcher,
        ns: NamespaceKey,
        id: BlockId,
        tier: kvfabric_store::Tier,
        chunk_keys: &[crate::ids::ChunkKey],
    ) -> Result<(), kvfabric_directory::DirectoryError> {
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
        first.map(|_| ()).and(second)
    }
}

/// Whether `e` says the incarnation a record was sent under is over (its lease expired, or
/// a newer epoch of this node exists).
fn incarnation_ended(e: &kvfabric_directory::DirectoryError) -> bool {
    use kvfabric_directory::{DirectoryError, Rejection};
    matches!(
        e,
        DirectoryError::Rejected(Rejection::LeaseExpired { .. } | Rejection::StaleEpoch { .. })
    )
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
