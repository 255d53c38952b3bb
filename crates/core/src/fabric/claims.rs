//! [`Fabric::claim_records`]: ownership records registered in this node's name without a
//! payload (the operator's directory load: `kvfabric bench directory` drives the directory
//! through it, one record or a batch per request).
//!
//! Each record goes through this node's own batcher, the path a put's registration takes
//! (followers forward to the leader; records that arrive together share an entry), and is
//! answered once committed. The node does not hold those blocks: a get that resolves to them
//! finds no copy here, and repair ignores them (it walks held blocks only); they are purged
//! with the rest of this incarnation's records when its lease ends.

use futures_util::future::join_all;
use kvfabric_store::{BlockId, NamespaceKey, Tier};

use super::Fabric;
use crate::error::FabricError;
use crate::ids::ChunkKey;

impl Fabric {
    /// Registers this node as an owner of each `(block, chunk key)` in the host tier, the key
    /// (if any) in namespace `ns`, all in flight together; `Ok` once every record committed.
    /// A standalone node has no directory: [`FabricError::DirectoryUnavailable`].
    pub async fn claim_records(
        &self,
        ns: NamespaceKey,
        records: &[(BlockId, Option<ChunkKey>)],
    ) -> Result<(), FabricError> {
        let unavailable = |m: String| FabricError::DirectoryUnavailable(m);
        let cluster = self
            .cluster
            .as_ref()
            .ok_or_else(|| unavailable("a standalone node has no directory".into()))?;
        let batcher = cluster
            .incarnation
            .batcher()
            .ok_or_else(|| unavailable("this node has not joined the directory yet".into()))?;
        let claims = records.iter().map(|(block, key)| {
            let chunk = key.map(|k| crate::cluster::directory_chunk_key(&ns, k));
            // Keyed by namespace as a put's records are (a lookup turns the key back).
            batcher.claim(
                crate::cluster::directory_block(&ns, *block),
                Tier::Host,
                chunk,
            )
        });
        for r in join_all(claims).await {
            r.map_err(|e| unavailable(e.to_string()))?;
        }
        Ok(())
    }
}
