//! References and pins.
//!
//! A reference keeps a block in the store (it may move to a slower tier); a pin keeps it where
//! it is (a live request is reading it). Both are counts; going below zero is an error, not a
//! silent no-op.

use super::{SlotId, Store};
use crate::error::StoreError;
use crate::id::{BlockId, NamespaceKey};

impl Store {
    /// Takes a reference on the oldest slot holding `id` in `namespace`.
    pub fn acquire(
        &mut self,
        id: &BlockId,
        namespace: &NamespaceKey,
    ) -> Result<SlotId, StoreError> {
        let slot = *self
            .slots_of(id, namespace)
            .first()
            .ok_or(StoreError::NotFound(*id))?;
        self.slot_mut(slot)?.refs += 1;
        Ok(slot)
    }

    /// Drops one reference. A block with no references stays cached until evicted or removed.
    pub fn release(&mut self, slot: SlotId) -> Result<u32, StoreError> {
        let s = self.slot_mut(slot)?;
        if s.refs == 0 {
            return Err(StoreError::Underflow {
                id: s.id,
                what: "reference",
            });
        }
        s.refs -= 1;
        Ok(s.refs)
    }

    /// Pins a slot in its tier: it will not be demoted, promoted or evicted until unpinned.
    pub fn pin(&mut self, slot: SlotId) -> Result<u32, StoreError> {
        let s = self.slot_mut(slot)?;
        s.pins += 1;
        Ok(s.pins)
    }

    /// Removes one pin.
    pub fn unpin(&mut self, slot: SlotId) -> Result<u32, StoreError> {
        let s = self.slot_mut(slot)?;
        // A read's pin is removed only by its own `PinnedRead` (see `pinned`).
        if s.pins <= s.reads {
            return Err(StoreError::Underflow {
                id: s.id,
                what: "pin",
            });
        }
        s.pins -= 1;
        Ok(s.pins)
    }

    /// Removes an unreferenced, unpinned slot now. Returns false (and keeps it) otherwise.
    pub fn remove_if_unused(&mut self, slot: SlotId) -> Result<bool, StoreError> {
        let s = self.slot(slot)?;
        if s.refs > 0 || s.pins > 0 {
            return Ok(false);
        }
        self.drop_slot(slot)?;
        Ok(true)
    }
}
