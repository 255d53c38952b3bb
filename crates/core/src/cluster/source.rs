//! [`StoreSource`]: the block transport serves peers from this node's store.
//!
//! A lookup reads the verified block (header ‖ payload) for `(namespace, id)` through
//! [`LocalNode`], so the transport streams exactly the bytes the store verified. Blocks the
//! node does not hold in that namespace are `NotFound`; a store failure is `Unavailable`.

use std::sync::Arc;

use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::source::SourceFuture;
use kvfabric_transport::{BlockSource, SourceLookup};

use crate::local::LocalNode;

/// Serves blocks from the node's store (none until it is open).
pub(crate) struct StoreSource {
    local: Arc<LocalNode>,
}

impl StoreSource {
    /// A source over `local`.
    pub(crate) fn new(local: Arc<LocalNode>) -> StoreSource {
        StoreSource { local }
    }
}

impl BlockSource for StoreSource {
    fn lookup(&self, namespace: NamespaceKey, id: BlockId) -> SourceFuture<'_> {
        Box::pin(async move {
            match self.local.read(&[namespace], &id) {
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
}
