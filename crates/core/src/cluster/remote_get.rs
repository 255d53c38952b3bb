//! A get that misses locally: the block's owners from this node's directory replica, the live
//! ones (lease current) tried best first — fastest tier, then lowest id — over the block
//! transport, verified as the bytes arrive; the copy is installed here and this node
//! registers itself as an owner. Bounded by [`REMOTE_GET_TIMEOUT_MS`]: with no live owner, or
//! none answering in time, the caller gets a miss, never a hang.
//!
//! Namespaces: ids are keyed by namespace, so the fetch names the caller's namespace and an
//! owner holding the id under another namespace answers "not found"; each namespace the
//! caller may read is tried in turn.
//!
//! Every fetch that succeeds is timed (from the request to the verified block, the owners
//! tried before the one that served it included) into the bandwidth table as a sample of the
//! link from the serving owner to this node.

use std::time::Duration;

use kvfabric_directory::ReadConsistency;
use kvfabric_store::{BlockId, NamespaceKey, Tier, VerifiedBlock};
use kvfabric_transport::PeerAddr;

use super::Cluster;
use crate::decide::owners::rank_owners;
use crate::ids::NodeId;

/// Bound on one remote get (every owner and namespace tried).
pub(crate) const REMOTE_GET_TIMEOUT_MS: u64 = 10_000;
/// Bound on registering the fetched copy (the get is served either way).
const REGISTER_TIMEOUT_MS: u64 = 5_000;

/// A block fetched from a peer and now held here.
pub(crate) struct RemoteHit {
    /// The verified block.
    pub(crate) block: VerifiedBlock,
    /// The tier it was installed in here.
    pub(crate) tier: Tier,
    /// The owner that served it.
    pub(crate) source: NodeId,
}

impl Cluster {
    /// Live owners of `id` other than this node, best first, as transport peers.
    fn live_owners(&self, id: &BlockId) -> Vec<(PeerAddr, NodeId)> {
        let owners = self.directory.view().read(|s| s.owners(id));
        let now_ms = self.clock.now_ms();
        rank_owners(self.me, &owners, |n| self.is_live(n, now_ms))
            .into_iter()
            .filter_map(|n| {
                let m = self.member(n)?;
                Some((PeerAddr::new(m.cert_name(), m.transport), n))
            })
            .collect()
    }

    /// Fetches `id` from its live owners under the first namespace of `read` that has it,
    /// installs and registers it. `None`: no live owner served it within the bound.
    pub(crate) async fn fetch_remote(
        &self,
        read: &[NamespaceKey],
        id: BlockId,
    ) -> Option<RemoteHit> {
        let owners = self.live_owners(&id);
        if owners.is_empty() {
            return None;
        }
        let peers: Vec<PeerAddr> = owners.iter().map(|(p, _)| p.clone()).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(REMOTE_GET_TIMEOUT_MS);
        let mut fetched = None;
        for ns in read {
            let started = std::time::Instant::now();
            let attempt = self.transport.fetch_from_owners(&peers, *ns, id);
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(f)) => {
                    fetched = Some((f, started.elapsed()));
                    break;
                }
                Ok(Err(e)) => {
                    tracing::debug!(block = %id, error = %e, "no owner served it in this namespace")
                }
                Err(_) => {
                    tracing::warn!(block = %id, "remote get timed out");
                    return None;
                }
            }
        }
        let (f, elapsed) = fetched?;
        let source = owners.get(f.owner_index).map(|(_, n)| *n)?;
        self.bandwidth
            .record(source, f.block.bytes().len() as u64, elapsed);
        let engine = crate::events::poll::peer_engine(self, source, f.block.namespace(), id).await;
        let tier = match self.local.install_with(&f.block, engine).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(block = %id, error = %e, "installing a fetched block failed");
                return None;
            }
        };
        if let Some(b) = self.incarnation.batcher() {
            let claim = b.claim(id, tier, None);
            match tokio::time::timeout(Duration::from_millis(REGISTER_TIMEOUT_MS), claim).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(block = %id, error = %e, "registering a fetched copy failed")
                }
                Err(_) => tracing::warn!(block = %id, "registering a fetched copy timed out"),
            }
        }
        Some(RemoteHit {
            block: f.block,
            tier,
            source,
        })
    }

    /// Live owners of `id` as node ids (for lookups).
    pub(crate) fn live_owner_ids(&self, id: &BlockId) -> Vec<NodeId> {
        let now_ms = self.clock.now_ms();
        let mut ids: Vec<NodeId> = self
            .directory
            .view()
            .read(|s| s.owners(id))
            .into_iter()
            .map(|o| NodeId(o.node.0))
            .filter(|n| self.is_live(*n, now_ms))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The block a chunk key names under one of `read`'s namespaces, at `consistency`
    /// (linearizable: reflects every registration completed before the call, or an error).
    pub(crate) async fn resolve_chunk_at(
        &self,
        read: &[NamespaceKey],
        key: crate::ids::ChunkKey,
        consistency: ReadConsistency,
    ) -> Result<Option<BlockId>, kvfabric_directory::DirectoryError> {
        for (i, ns) in read.iter().enumerate() {
            let k = super::directory_chunk_key(ns, key);
            // One barrier is enough: later namespaces read the state it brought up to date.
            let c = if i == 0 {
                consistency
            } else {
                ReadConsistency::Local
            };
            if let Some(b) = self.directory.resolve(&k, c).await? {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }
}
