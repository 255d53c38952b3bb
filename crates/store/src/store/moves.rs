//! Tier moves reported to the store's owner: when recording is on, every slot that a
//! demotion or promotion moved to another tier is noted, for the owner to take after each
//! call (the node publishes them as KV events: removed from one medium, stored in another).
//!
//! Off by default, so a store nobody drains keeps nothing; the owner that turns it on drains
//! it after every call, which bounds it by the moves one call makes.

use super::{SlotId, Store};
use crate::handle::Tier;
use crate::id::{BlockId, NamespaceKey};

/// One slot moved between tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierMove {
    /// The slot moved (its id stays valid).
    pub slot: SlotId,
    /// The block's id.
    pub id: BlockId,
    /// Its namespace.
    pub namespace: NamespaceKey,
    /// Where it was.
    pub from: Tier,
    /// Where it is now.
    pub to: Tier,
}

impl Store {
    /// Turns recording of tier moves on (or off, discarding what was recorded).
    pub fn record_moves(&mut self, on: bool) {
        self.moves = on.then(Vec::new);
    }

    /// The tier moves recorded since the last call, oldest first (empty when recording is off).
    pub fn take_moves(&mut self) -> Vec<TierMove> {
        self.moves.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Notes a move when recording.
    pub(crate) fn note_move(&mut self, m: TierMove) {
        if m.from != m.to {
            if let Some(moves) = &mut self.moves {
                moves.push(m);
            }
        }
    }
}
