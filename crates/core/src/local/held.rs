//! [`Held`]: the blocks this node holds a reference on, keyed by `(namespace, id)`.
//!
//! Keyed by the pair so that a lookup of another tenant's id and a lookup of an absent id are
//! the same single map miss: nothing on the read path distinguishes them, in status, body or
//! work done. The node holds exactly one store reference per slot listed here (a put that
//! dedups onto a slot already held gives its extra reference back at once).

use std::collections::HashMap;

use kvfabric_store::{BlockId, NamespaceKey, SlotId};

use crate::events::BlockInfo;
use crate::ids::ChunkKey;

/// Chunk keys remembered per held block; a new key beyond this replaces the oldest one.
pub(crate) const CHUNK_KEYS_PER_BLOCK_MAX: usize = 16;

/// One held block.
#[derive(Debug, Default)]
pub(crate) struct HeldBlock {
    /// Slots holding it (more than one only after a dedup collision), one reference each.
    pub(crate) slots: Vec<SlotId>,
    /// Chunk keys recorded for it, oldest first, at most [`CHUNK_KEYS_PER_BLOCK_MAX`].
    pub(crate) chunk_keys: Vec<ChunkKey>,
    /// What its events say of it (token count, engine identity): set when it is first held
    /// and kept while it is, so its removal names the hashes its store named.
    pub(crate) info: Option<BlockInfo>,
}

/// The held blocks of this node.
#[derive(Debug, Default)]
pub(crate) struct Held {
    map: HashMap<(NamespaceKey, BlockId), HeldBlock>,
}

impl Held {
    /// Whether the node holds `id` in `ns`.
    pub(crate) fn contains(&self, ns: &NamespaceKey, id: &BlockId) -> bool {
        self.map.contains_key(&(*ns, *id))
    }

    /// The held block, if any.
    #[cfg(test)]
    pub(crate) fn get(&self, ns: &NamespaceKey, id: &BlockId) -> Option<&HeldBlock> {
        self.map.get(&(*ns, *id))
    }

    /// The slots of a held block, in the order they were sealed (more than one only after a
    /// dedup collision: a block's variants).
    pub(crate) fn slots(&self, ns: &NamespaceKey, id: &BlockId) -> Option<&[SlotId]> {
        self.map.get(&(*ns, *id)).map(|b| b.slots.as_slice())
    }

    /// The held block, if any, for changing.
    pub(crate) fn get_mut(&mut self, ns: &NamespaceKey, id: &BlockId) -> Option<&mut HeldBlock> {
        self.map.get_mut(&(*ns, *id))
    }

    /// Records a slot; `false` if it was already held (the caller then owns a spare reference).
    pub(crate) fn insert(&mut self, ns: NamespaceKey, id: BlockId, slot: SlotId) -> bool {
        let entry = self.map.entry((ns, id)).or_default();
        if entry.slots.contains(&slot) {
            return false;
        }
        entry.slots.push(slot);
        true
    }

    /// Forgets a block, handing back its slots and chunk keys.
    pub(crate) fn remove(&mut self, ns: &NamespaceKey, id: &BlockId) -> Option<HeldBlock> {
        self.map.remove(&(*ns, *id))
    }

    /// The events' view of a held block.
    pub(crate) fn info(&self, ns: &NamespaceKey, id: &BlockId) -> Option<&BlockInfo> {
        self.map.get(&(*ns, *id)).and_then(|b| b.info.as_ref())
    }

    /// Every held block with its namespace and info (for the block-info log).
    pub(crate) fn infos(&self) -> impl Iterator<Item = (&NamespaceKey, &BlockId, &BlockInfo)> {
        self.map
            .iter()
            .filter_map(|((ns, id), b)| b.info.as_ref().map(|i| (ns, id, i)))
    }

    /// Every held block with its namespace and first slot.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (NamespaceKey, BlockId, SlotId)> + '_ {
        self.map
            .iter()
            .filter_map(|((ns, id), b)| b.slots.first().map(|s| (*ns, *id, *s)))
    }

    /// Blocks held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}
