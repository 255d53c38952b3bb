//! [`BlockSource`]: what a serving transport reads blocks from.
//!
//! The node implements it over its store; the transport streams whatever bytes the source
//! returns (header ‖ payload) without re-encoding or copying them (`Bytes` is shared). A
//! pushed block reaches the source only once the receiving transport verified it (a
//! [`VerifiedBlock`]); the source installs it and answers whether it did. The
//! source is trusted to return the bytes of a block it verified: in production those are the
//! bytes of a [`VerifiedBlock`] (see [`MemorySource`]). The receiver re-verifies every byte
//! anyway, so a source that lies (as the fault tests build on purpose) is caught there.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::RwLock;

use bytes::Bytes;
use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};

/// What a source answers for one (namespace, id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceLookup {
    /// The block's bytes, header ‖ payload.
    Found(Bytes),
    /// Not held here.
    NotFound,
    /// Held but unreadable now (a failed disk read, a quarantined entry); the source logs why.
    Unavailable,
}

/// The future a lookup returns.
pub type SourceFuture<'a> = Pin<Box<dyn Future<Output = SourceLookup> + Send + 'a>>;

/// What a source answers to a probe for one (namespace, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Held; the block's stored length (header ‖ payload).
    Held(u64),
    /// Not held here.
    NotFound,
    /// Held but unreadable now.
    Unavailable,
}

/// What a source did with a pushed block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// Installed (and, on a node, registered as this node's): the pusher may count the copy.
    Stored,
    /// Not taken now (not ready, full, the directory did not record it); the source logs why.
    Unavailable,
}

/// A boxed future of a source.
pub type SourceTask<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a serving transport gets block bytes, and where pushed blocks go.
pub trait BlockSource: Send + Sync + 'static {
    /// The block `id` under `namespace`, or why not. May wait (a disk tier), but the server
    /// bounds the wait by `fetch_timeout_ms` and abandons it when the client goes away.
    fn lookup(&self, namespace: NamespaceKey, id: BlockId) -> SourceFuture<'_>;

    /// Whether `id` under `namespace` is held, without handing its bytes out. By default, a
    /// lookup (a source with a cheaper answer overrides it).
    fn holds(&self, namespace: NamespaceKey, id: BlockId) -> SourceTask<'_, Holding> {
        Box::pin(async move {
            match self.lookup(namespace, id).await {
                SourceLookup::Found(b) => Holding::Held(b.len() as u64),
                SourceLookup::NotFound => Holding::NotFound,
                SourceLookup::Unavailable => Holding::Unavailable,
            }
        })
    }

    /// Takes a block a peer pushed, already verified against its id. A source that serves
    /// blocks but takes none (a read-only one) keeps this default: every push is answered
    /// [`Accepted::Unavailable`]. The server bounds the wait by `fetch_timeout_ms`.
    fn accept(&self, block: VerifiedBlock) -> SourceTask<'_, Accepted> {
        drop(block);
        Box::pin(async { Accepted::Unavailable })
    }
}

/// An in-memory source of verified blocks (tests, benches, and client-only transports).
#[derive(Debug, Default)]
pub struct MemorySource {
    blocks: RwLock<HashMap<(NamespaceKey, BlockId), Bytes>>,
}

impl MemorySource {
    /// An empty source.
    pub fn new() -> MemorySource {
        MemorySource::default()
    }

    /// Adds a block; only verified blocks can be served from here.
    pub fn insert(&self, block: VerifiedBlock) {
        let key = (block.namespace(), block.id());
        let bytes = Bytes::from(block.into_bytes());
        self.blocks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, bytes);
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl BlockSource for MemorySource {
    fn accept(&self, block: VerifiedBlock) -> SourceTask<'_, Accepted> {
        self.insert(block);
        Box::pin(async { Accepted::Stored })
    }

    fn lookup(&self, namespace: NamespaceKey, id: BlockId) -> SourceFuture<'_> {
        let found = self
            .blocks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace, id))
            .cloned();
        Box::pin(async move {
            match found {
                Some(bytes) => SourceLookup::Found(bytes),
                None => SourceLookup::NotFound,
            }
        })
    }
}
