//! A get that misses locally: the block's owners from this node's directory replica, the live
//! ones (lease current) tried best first — fastest tier, then lowest id — over the block
//! transport, verified as the bytes arrive; the copy is installed here and this node
//! registers itself as an owner. Bounded by [`REMOTE_GET_TIMEOUT_MS`]: with no live owner, or
//! none answering in time, the caller gets a miss, never a hang.
//!
//! Namespaces: the directory keys owner records by namespace
//! ([`super::directory_block`]), so owners are looked up under each namespace the caller may
//! read (all of them, whatever is found) and only those are asked, naming that namespace: an
//! id held under another tenant's namespace has no owner under the caller's, and its miss
//! ends here, before any peer is asked, exactly as for an id nobody holds.
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
    /// Live owners of `(ns, id)` other than this node, best first, as transport peers.
    fn live_owners(&self, ns: &NamespaceKey, id: BlockId) -> Vec<(PeerAddr, NodeId)> {
        let key = super::directory_block(ns, id);
        let owners = self.directory.view().read(|s| s.owners(&key));
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
        // The directory keys owners by namespace: only the caller's namespaces are asked
        // about, so another tenant's id finds no owner here, exactly like an absent one, and
        // no peer is ever asked for it.
        let by_ns: Vec<_> = read
            .iter()
            .map(|ns| (*ns, self.live_owners(ns, id)))
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(REMOTE_GET_TIMEOUT_MS);
        let mut fetched = None;
        for (ns, owners) in &by_ns {
            if owners.is_empty() {
                continue;
            }
            let peers: Vec<PeerAddr> = owners.iter().map(|(p, _)| p.clone()).collect();
            let started = std::time::Instant::now();
            let attempt = self.transport.fetch_from_owners(&peers, *ns, id);
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(f)) => {
                    let source = owners.get(f.owner_index).map(|(_, n)| *n);
                    fetched = Some((f, source, *ns, started.elapsed()));
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
        let (f, source, ns, elapsed) = fetched?;
        let source = source?;
        self.bandwidth
            .record(source, f.block.bytes().len() as u64, elapsed);
        let engine = crate::events::poll::peer_engine(self, source, f.block.namespace(), id).await;
        let tier = match self.local.install_with(&f.block, engine) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(block = %id, error = %e, "installing a fetched block failed");
                return None;
            }
        };
        if let Some(b) = self.incarnation.batcher() {
            let claim = b.claim(super::directory_block(&ns, id), tier, None);
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

    /// Live owners of `(ns, id)` as node ids (for lookups).
    pub(crate) fn live_owner_ids(&self, ns: &NamespaceKey, id: BlockId) -> Vec<NodeId> {
        let now_ms = self.clock.now_ms();
        let key = super::directory_block(ns, id);
        let mut ids: Vec<NodeId> = self
            .directory
            .view()
            .read(|s| s.owners(&key))
            .into_iter()
            .map(|o| NodeId(o.node.0))
            .filter(|n| self.is_live(*n, now_ms))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The block a chunk key names under one of `read`'s namespaces, and that namespace, at
    /// `consistency` (linearizable: reflects every registration completed before the call,
    /// or an error).
    pub(crate) async fn resolve_chunk_at(
        &self,
        read: &[NamespaceKey],
        key: crate::ids::ChunkKey,
        consistency: ReadConsistency,
    ) -> Result<Option<(NamespaceKey, BlockId)>, kvfabric_directory::DirectoryError> {
        let mut found = None;
        for (i, ns) in read.iter().enumerate() {
            let k = super::directory_chunk_key(ns, key);
            // One barrier is enough: later namespaces read the state it brought up to date.
            let c = if i == 0 {
                consistency
            } else {
                ReadConsistency::Local
            };
            // Every namespace is read (no early exit): the work does not depend on which
            // one, if any, maps the key.
            let b = self.directory.resolve(&k, c).await?;
            if found.is_none() {
                found = b.map(|b| (*ns, super::block_of_directory(ns, b)));
            }
        }
        Ok(found)
    }
}
