//! Block sources that misbehave on purpose, and test blocks, for the conformance suite and
//! the fault tests. None of these is used by a production path: a node serves from its store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kvfabric_store::{Blake3Ids, BlockHeader, BlockId, IdHasher, NamespaceKey, VerifiedBlock};

use crate::source::{BlockSource, MemorySource, SourceFuture, SourceLookup};

/// A well-formed block (64-byte header ‖ `payload_len` patterned bytes), verified.
pub fn test_block(namespace: NamespaceKey, payload_len: usize, seed: u64) -> VerifiedBlock {
    let header = BlockHeader {
        fingerprint: seed.to_le_bytes().repeat(2).try_into().expect("16 bytes"),
        tokens: 64,
        layers: 1,
        regions: 2,
        flags: kvfabric_store::block::FLAG_ROPE_CANONICAL,
        payload_len: payload_len as u64,
    };
    let mut bytes = header.encode().to_vec();
    // A cheap pattern that differs per seed and per position (xorshift).
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    bytes.extend((0..payload_len).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    let id = Blake3Ids.id(&namespace, &[&bytes]);
    VerifiedBlock::verify(namespace, id, bytes).expect("hashes to its own id")
}

/// Serves every block with one byte flipped (a lying or corrupted peer).
#[derive(Debug)]
pub struct FlippingSource {
    inner: MemorySource,
    /// Offset of the flipped byte (clamped to the block).
    pub offset: usize,
}

impl FlippingSource {
    /// Lies about the blocks in `inner`, at `offset`.
    pub fn new(inner: MemorySource, offset: usize) -> FlippingSource {
        FlippingSource { inner, offset }
    }
}

impl BlockSource for FlippingSource {
    fn lookup(&self, namespace: NamespaceKey, id: BlockId) -> SourceFuture<'_> {
        Box::pin(async move {
            match self.inner.lookup(namespace, id).await {
                SourceLookup::Found(bytes) => {
                    let mut v = bytes.to_vec();
                    let at = self.offset.min(v.len().saturating_sub(1));
                    v[at] ^= 0x01;
                    SourceLookup::Found(Bytes::from(v))
                }
                other => other,
            }
        })
    }
}

/// Never answers (a hung disk, a wedged peer): fetches must end by their timeout.
#[derive(Debug, Default)]
pub struct StallingSource;

impl BlockSource for StallingSource {
    fn lookup(&self, _: NamespaceKey, _: BlockId) -> SourceFuture<'_> {
        Box::pin(std::future::pending())
    }
}

/// Answers after a delay and records the most lookups it ever saw at once.
#[derive(Debug)]
pub struct SlowCountingSource {
    inner: MemorySource,
    delay: Duration,
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl SlowCountingSource {
    /// Serves `inner`, each lookup taking `delay`.
    pub fn new(inner: MemorySource, delay: Duration) -> Arc<SlowCountingSource> {
        Arc::new(SlowCountingSource {
            inner,
            delay,
            now: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        })
    }

    /// The most lookups in progress at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

impl BlockSource for SlowCountingSource {
    fn lookup(&self, namespace: NamespaceKey, id: BlockId) -> SourceFuture<'_> {
        Box::pin(async move {
            // Decrements however the lookup ends, including when the server abandons it.
            struct Leave<'a>(&'a AtomicUsize);
            impl Drop for Leave<'_> {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::SeqCst);
                }
            }
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            let _leave = Leave(&self.now);
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.inner.lookup(namespace, id).await
        })
    }
}
