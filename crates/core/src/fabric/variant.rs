//! [`Fabric::get_variant`] and [`Fabric::head_variant`]: the later blocks under one id.
//!
//! Two different payloads hash to one id only if the id function is broken (a security
//! signal, counted in `dedup_collisions`); the store then keeps the second as a block of its
//! own rather than serving the first's bytes for it. On the node that sealed it, that block is
//! *variant* 1 of the id (2, 3, … for more), in the order they were sealed; the put's answer
//! names it. An id alone always reads variant 0, here and on every other node; a later variant
//! is this node's alone (never replicated nor fetched), and goes with the id's delete.

use kvfabric_store::{BlockId, NamespaceKey};

use super::{Fabric, Head, Served};
use crate::error::FabricError;

impl Fabric {
    /// The `variant`-th block this node holds under `id` (see [`PutDone::variant`]); variant
    /// 0 is [`Fabric::get`]. Later variants exist only on the node that sealed them (a dedup
    /// collision), so they are never fetched from peers.
    ///
    /// [`PutDone::variant`]: super::PutDone::variant
    pub async fn get_variant(
        &self,
        read: &[NamespaceKey],
        id: BlockId,
        variant: u32,
        position: Option<u64>,
    ) -> Result<Served, FabricError> {
        if variant == 0 {
            return self.get(read, id, position).await;
        }
        let (block, tier) = self
            .local
            .get_variant(read, &id, variant)?
            .ok_or(FabricError::NotFound)?;
        self.served(block, tier, None, position)
    }

    /// Where the `variant`-th block under `id` sits in this node's tiers and its payload
    /// length, without reading it; variant 0 is [`Fabric::head`].
    pub fn head_variant(
        &self,
        read: &[NamespaceKey],
        id: BlockId,
        variant: u32,
    ) -> Result<Head, FabricError> {
        let (tier, payload_len) = self
            .local
            .head_variant(read, &id, variant)?
            .ok_or(FabricError::NotFound)?;
        Ok(Head {
            tier,
            payload_len,
            source: None,
        })
    }
}
