//! Reads: tier read-back with verification, hit accounting, promotion, position shifts.

use super::{tier_index, SlotId, Store};
use crate::block::{BlockHeader, HEADER_LEN};
use crate::error::StoreError;
use crate::geometry::ModelGeometry;
use crate::handle::Tier;
use crate::id::{BlockId, NamespaceKey};
use crate::rope::{rotate_block, Direction};
use crate::verified::VerifiedBlock;

impl Store {
    /// Reads a slot's bytes from its tier. Bytes that fail verification are quarantined: the
    /// slot is forgotten and counted, and [`StoreError::Corrupt`] returned.
    pub(crate) fn read_slot(&mut self, slot: SlotId) -> Result<Vec<u8>, StoreError> {
        let s = self.slot(slot)?.clone();
        let tier = self.tier_mut(s.handle.tier).expect("present");
        match tier.read(&s.handle, &s.id) {
            Ok(b) => Ok(b),
            Err(e @ StoreError::Corrupt { .. }) => {
                self.counters.verify_failures += 1;
                // The tier already quarantined the entry; the handle is dead.
                self.remove_slot(slot);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads one slot's bytes (header ‖ payload), verified where the tier can lose bytes.
    pub fn read(&mut self, slot: SlotId) -> Result<VerifiedBlock, StoreError> {
        let (id, namespace) = {
            let s = self.slot(slot)?;
            (s.id, s.namespace)
        };
        Ok(VerifiedBlock::checked(id, namespace, self.read_slot(slot)?))
    }

    /// Reads a block (header ‖ payload) and the tier it was served from. A hit is promoted
    /// one tier up when room can be made (see [`Store::get_slot`]).
    pub fn get(
        &mut self,
        id: &BlockId,
        namespace: &NamespaceKey,
    ) -> Result<(VerifiedBlock, Tier), StoreError> {
        for slot in self.slots_of(id, namespace) {
            match self.get_slot(slot) {
                Err(StoreError::Corrupt { .. }) => continue,
                found => return found,
            }
        }
        self.counters.misses += 1;
        Err(StoreError::NotFound(*id))
    }

    /// Reads one slot as [`Store::get`] reads a block: verified, counted as a hit of its tier,
    /// promoted one tier up when room can be made (disk to host; host to GPU when the GPU
    /// policy promotes hits). Bytes that fail verification are quarantined
    /// ([`StoreError::Corrupt`]). The way to a block's second and later slots, which exist only
    /// after a dedup collision (same id, other bytes).
    pub fn get_slot(&mut self, slot: SlotId) -> Result<(VerifiedBlock, Tier), StoreError> {
        let (id, namespace, tier) = {
            let s = self.slot(slot)?;
            (s.id, s.namespace, s.handle.tier)
        };
        let bytes = self.read_slot(slot)?;
        self.counters.hits[tier_index(tier)] += 1;
        if let Some(p) = &mut self.policies[tier_index(tier)] {
            p.touch(slot);
        }
        if tier != Tier::Gpu {
            self.promote(slot, &bytes)?;
        }
        Ok((VerifiedBlock::checked(id, namespace, bytes), tier))
    }

    /// Reads a block's payload, with `k_rope` rotated so the first token sits at `position`
    /// (canonical, un-rotated rows when `None`). The block must be of `geometry`.
    pub fn read_payload(
        &mut self,
        id: &BlockId,
        namespace: &NamespaceKey,
        geometry: &ModelGeometry,
        position: Option<u64>,
    ) -> Result<(Vec<u8>, Tier), StoreError> {
        let (block, tier) = self.get(id, namespace)?;
        let header = BlockHeader::decode(block.bytes())?;
        if header.fingerprint != geometry.fingerprint() {
            return Err(StoreError::Header(format!(
                "block {id} was sealed with another geometry than `{}`",
                geometry.name
            )));
        }
        let mut payload = block.into_bytes().split_off(HEADER_LEN);
        if let Some(p) = position {
            rotate_block(
                &geometry.block_layout(),
                &mut payload,
                p,
                Direction::Forward,
            )?;
        }
        Ok((payload, tier))
    }
}
