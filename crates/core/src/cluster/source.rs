//! [`StoreSource`]: the block transport serves peers from this node's store, and takes the
//! blocks they push.
//!
//! A lookup reads the verified block (header ‖ payload) for `(namespace, id)` through
//! [`LocalNode`], so the transport streams exactly the bytes the store verified; a probe
//! answers from the store's index without reading. Blocks the node does not hold in that
//! namespace are `NotFound`; a store failure is `Unavailable`.
//!
//! A pushed block arrives verified (the transport's receiver hashed it against its id): it is
//! installed and then claimed in the directory under this node's epoch, and only then is the
//! push answered `Stored` — the pusher counts a copy that is held and registered. Before the
//! node has joined, or when the store or the directory refuses, the answer is `Unavailable`.

use std::sync::{Arc, OnceLock, Weak};

use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};
use kvfabric_transport::source::{SourceFuture, SourceTask};
use kvfabric_transport::{Accepted, BlockSource, Holding, SourceLookup};

use super::Cluster;
use crate::local::LocalNode;

/// Serves blocks from the node's store and takes pushed ones.
pub(crate) struct StoreSource {
    local: Arc<LocalNode>,
    /// The cluster side, once assembled (pushes register through it).
    cluster: OnceLock<Weak<Cluster>>,
}

impl StoreSource {
    /// A source over `local`.
    pub(crate) fn new(local: Arc<LocalNode>) -> StoreSource {
        StoreSource {
            local,
            cluster: OnceLock::new(),
        }
    }

    /// Pushed blocks register through `cluster` from now on.
    pub(crate) fn attach(&self, cluster: Weak<Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    async fn take(&self, block: VerifiedBlock) -> Result<(), String> {
        let cluster = self
            .cluster
            .get()
            .and_then(Weak::upgrade)
            .ok_or("the cluster side is not running")?;
        let batcher = cluster
            .incarnation
            .batcher()
            .ok_or("not joined to the directory yet")?;
        // The identity the pusher offered just before (`offers`), if any.
        let engine = cluster
            .offers
            .take(block.namespace(), block.id(), cluster.clock.now_ms());
        let tier = self
            .local
            .install_with(&block, engine)
            .await
            .map_err(|e| e.to_string())?;
        batcher
            .claim(
                super::directory_block(&block.namespace(), block.id()),
                tier,
                None,
            )
            .await
            .map_err(|e| format!("registering the copy: {e}"))?;
        Ok(())
    }
}

impl BlockSource for StoreSource {
    fn lookup(&self, namespace: NamespaceKey, id: BlockId) -> SourceFuture<'_> {
        Box::pin(async move {
            match self.local.read_copy(&[namespace], &id) {
                // A host block is streamed from its place in the arena, pinned until sent.
                Ok(Some(r)) => SourceLookup::Found(r.bytes),
                Ok(None) => SourceLookup::NotFound,
                Err(e) => {
                    tracing::warn!(%id, error = %e, "serving a block to a peer failed");
                    SourceLookup::Unavailable
                }
            }
        })
    }

    fn holds(&self, namespace: NamespaceKey, id: BlockId) -> SourceTask<'_, Holding> {
        Box::pin(async move {
            match self.local.head(&[namespace], &id) {
                Ok(Some((_, payload_len))) => {
                    Holding::Held(payload_len + kvfabric_store::HEADER_LEN as u64)
                }
                Ok(None) => Holding::NotFound,
                Err(e) => {
                    tracing::warn!(%id, error = %e, "answering a probe failed");
                    Holding::Unavailable
                }
            }
        })
    }

    fn accept(&self, block: VerifiedBlock) -> SourceTask<'_, Accepted> {
        Box::pin(async move {
            let id = block.id();
            match self.take(block).await {
                Ok(()) => Accepted::Stored,
                Err(reason) => {
                    tracing::warn!(block = %id, %reason, "a pushed copy was not taken");
                    Accepted::Unavailable
                }
            }
        })
    }
}
