//! [`Fabric::get`], [`Fabric::head`] and [`Fabric::delete`] of one block.
//!
//! A block is visible only in the namespace it was sealed in (and in shared namespaces to
//! every caller that may read them): every call takes the namespaces the caller may read, and
//! the store is probed by `(namespace, id)`, so another tenant's id and an absent id take the
//! same path to the same [`FabricError::NotFound`].
//!
//! On a cluster member a get that misses locally fetches the block from its live owners,
//! installs it and serves it, naming the owner that served it; a head answers as a get would
//! (this node's copy, else an owner's answer to a probe, naming it), without moving bytes;
//! both say not found only when no live owner is known (or every one said it holds none),
//! and owners unreachable when owners exist but none served. A delete that drops the node's
//! reference also releases its ownership record in the directory.

use bytes::Bytes;
use kvfabric_store::block::BlockHeader;
use kvfabric_store::rope::{rotate_block, Direction};
use kvfabric_store::{BlockId, NamespaceKey, Tier, HEADER_LEN};

use super::Fabric;
use crate::cluster::remote_get::Miss;
use crate::error::FabricError;
use crate::ids::NodeId;
use crate::local::Deleted;

/// A block served by [`Fabric::get`].
#[derive(Debug, Clone)]
pub struct Served {
    /// The payload (rotated to the position asked for), a view into the verified buffer.
    pub payload: Bytes,
    /// The tier it was read from (or installed in, when fetched from a peer).
    pub tier: Tier,
    /// The owner that served it; `None` when this node held it.
    pub source: Option<NodeId>,
    /// Its model, when it is among this node's presets.
    pub model: Option<String>,
}

/// What [`Fabric::head`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The tier it sits in (on its source).
    pub tier: Tier,
    /// Its payload length.
    pub payload_len: u64,
    /// The owner that answered; `None` when this node holds it.
    pub source: Option<NodeId>,
}

/// A read no owner served, as the caller is told.
fn missed(id: BlockId, m: Miss) -> FabricError {
    match m {
        Miss::NotFound => FabricError::NotFound,
        Miss::Unreachable(owners) => FabricError::OwnersUnreachable { block: id, owners },
        Miss::NoBarrier(reason) => FabricError::DirectoryUnavailable(format!(
            "block {id}: no owner known here, and no read barrier to confirm it: {reason}"
        )),
    }
}

impl Fabric {
    /// The payload of `id` from the first namespace of `read` that holds it here, else (on a
    /// cluster member) from its live owners; `k_rope` rotated to `position` if asked.
    pub async fn get(
        &self,
        read: &[NamespaceKey],
        id: BlockId,
        position: Option<u64>,
    ) -> Result<Served, FabricError> {
        let (bytes, tier, source) = match self.local.read(read, &id)? {
            Some(r) => (r.bytes, r.tier, None),
            None => {
                let Some(c) = &self.cluster else {
                    self.local.count_not_found();
                    return Err(FabricError::NotFound);
                };
                let hit = c.fetch_remote(read, id).await.map_err(|m| {
                    if matches!(m, Miss::NotFound) {
                        self.local.count_not_found();
                    }
                    missed(id, m)
                })?;
                (
                    Bytes::from(hit.block.into_bytes()),
                    hit.tier,
                    Some(hit.source),
                )
            }
        };
        self.served(bytes, tier, source, position)
    }

    /// A verified block (header ‖ payload) as served: its model named, `k_rope` rotated to
    /// `position` if asked.
    pub(super) fn served(
        &self,
        bytes: Bytes,
        tier: Tier,
        source: Option<NodeId>,
        position: Option<u64>,
    ) -> Result<Served, FabricError> {
        let header = BlockHeader::decode(&bytes)?;
        let model = self.catalog.by_fingerprint(&header.fingerprint);
        let bytes = match position {
            None => bytes,
            Some(p) => {
                // Rotated into a copy: the stored bytes stay canonical.
                let model = model.ok_or(FabricError::UnknownGeometry)?;
                let mut copy = bytes.to_vec();
                rotate_block(
                    &model.layout,
                    &mut copy[HEADER_LEN..],
                    p,
                    Direction::Forward,
                )?;
                Bytes::from(copy)
            }
        };
        // The payload is served as a view of the verified bytes (the arena's, for a host
        // block): no copy.
        let payload = bytes.slice(HEADER_LEN..);
        Ok(Served {
            payload,
            tier,
            source,
            model: model.map(|m| m.geometry.name.clone()),
        })
    }

    /// What a get of `id` would find, without reading or moving it: this node's copy (its
    /// tier and payload length), else, on a cluster member, an owner's answer to a probe
    /// (its tier, the length it reports); the same not-found and unreachable verdicts as a
    /// get.
    pub async fn head(&self, read: &[NamespaceKey], id: BlockId) -> Result<Head, FabricError> {
        if let Some((tier, payload_len)) = self.local.head(read, &id)? {
            return Ok(Head {
                tier,
                payload_len,
                source: None,
            });
        }
        let Some(c) = &self.cluster else {
            return Err(FabricError::NotFound);
        };
        let h = c.probe_remote(read, id).await.map_err(|m| missed(id, m))?;
        Ok(Head {
            tier: h.tier,
            payload_len: h.stored_len.saturating_sub(HEADER_LEN as u64),
            source: Some(h.source),
        })
    }

    /// Drops this node's reference on `id` under the first of `own` (the caller's namespace
    /// under each readable secret, the current one first) that holds it, and its ownership
    /// record: every variant of it this node holds. `read` decides whether a block the caller
    /// may not delete is [`FabricError::DeleteForbidden`] (visible to them) or
    /// [`FabricError::NotFound`].
    pub async fn delete(
        &self,
        own: &[NamespaceKey],
        read: &[NamespaceKey],
        id: BlockId,
    ) -> Result<(), FabricError> {
        let mut held = None;
        for k in own {
            if held.is_none() {
                held = self.local.head(&[*k], &id)?.map(|(tier, _)| (*k, tier));
            }
        }
        let write = held.map_or(own.first().copied(), |(k, _)| Some(k));
        let Some(write) = write else {
            return Err(FabricError::NotFound);
        };
        match self.local.delete(&write, read, &id)? {
            Deleted::Released => {
                if let (Some(c), Some((ns, tier))) = (&self.cluster, held) {
                    c.release(ns, id, tier).await;
                }
                Ok(())
            }
            Deleted::Forbidden => Err(FabricError::DeleteForbidden),
            Deleted::NotFound => Err(FabricError::NotFound),
        }
    }
}
