//! [`Fabric::lookup`]: chunk keys → block and owners.
//!
//! On a cluster member the answer comes from this node's replica of the directory: the chunk
//! key (keyed by each namespace the caller may read, so tenants never see each other's keys)
//! → its block → the members holding it whose lease is current. On a standalone node it
//! covers what was put here with a chunk key: the owner is this node for a key whose block it
//! holds. A key nobody knows resolves to no block and no owners; a key whose block is dormant
//! in the directory (every holder restarted or lost its lease, for at most a lease) resolves
//! to its block with no owners.
//!
//! [`ReadConsistency::Linearizable`] (cluster members) resolves chunk keys with a read index
//! from the leader, so the answer reflects every put completed before the lookup began;
//! without a leader or quorum within the directory's read timeout it is
//! [`FabricError::DirectoryUnavailable`]. `Local` reads this node's replica (it may lag).

use kvfabric_directory::ReadConsistency;
use kvfabric_store::{BlockId, NamespaceKey};

use super::Fabric;
use crate::error::FabricError;
use crate::ids::{ChunkKey, NodeId};

/// What one chunk key resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The key asked about.
    pub key: ChunkKey,
    /// The block it names, if any.
    pub block: Option<BlockId>,
    /// The block's live owners, by id.
    pub owners: Vec<NodeId>,
}

impl Fabric {
    /// Resolves each of `keys` under the namespaces of `read`, at `consistency`.
    pub async fn lookup(
        &self,
        read: &[NamespaceKey],
        keys: &[ChunkKey],
        consistency: ReadConsistency,
    ) -> Result<Vec<Resolved>, FabricError> {
        if let Some(cluster) = &self.cluster {
            let mut results = Vec::with_capacity(keys.len());
            for k in keys {
                let found = cluster
                    .resolve_chunk_at(read, *k, consistency)
                    .await
                    .map_err(|e| FabricError::DirectoryUnavailable(e.to_string()))?;
                let owners = found
                    .map(|(ns, b)| cluster.live_owner_ids(&ns, b))
                    .unwrap_or_default();
                results.push(Resolved {
                    key: *k,
                    block: found.map(|(_, b)| b),
                    owners,
                });
            }
            return Ok(results);
        }
        let found = self.local.lookup(read, keys)?;
        Ok(keys
            .iter()
            .zip(found)
            .map(|(k, block)| Resolved {
                key: *k,
                owners: block.iter().map(|_| self.me).collect(),
                block,
            })
            .collect())
    }
}
