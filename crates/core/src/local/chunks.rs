//! [`ChunkIndex`]: `(namespace, chunk key) → block id`, known to this node only.
//!
//! A stand-in for the directory's replicated chunk-key map (issue 4) until the directory is
//! wired: it answers `POST /v1/lookup` from what was put on this node, is not persisted (a
//! restart forgets it), and is bounded by the held blocks: an entry lives only while its block
//! is held, and each block keeps at most
//! [`CHUNK_KEYS_PER_BLOCK_MAX`](super::held::CHUNK_KEYS_PER_BLOCK_MAX) keys.

use std::collections::HashMap;

use kvfabric_store::{BlockId, NamespaceKey};

use super::held::{Held, CHUNK_KEYS_PER_BLOCK_MAX};
use crate::ids::ChunkKey;

/// The local chunk-key map.
#[derive(Debug, Default)]
pub(crate) struct ChunkIndex {
    map: HashMap<(NamespaceKey, ChunkKey), BlockId>,
}

impl ChunkIndex {
    /// The block `key` maps to in `ns`.
    pub(crate) fn get(&self, ns: &NamespaceKey, key: &ChunkKey) -> Option<BlockId> {
        self.map.get(&(*ns, *key)).copied()
    }

    /// Maps `key` to `id` (which `held` must hold in `ns`); the latest put of a key wins.
    pub(crate) fn record(&mut self, held: &mut Held, ns: NamespaceKey, key: ChunkKey, id: BlockId) {
        match self.map.insert((ns, key), id) {
            Some(old) if old == id => return,
            Some(old) => {
                if let Some(b) = held.get_mut(&ns, &old) {
                    b.chunk_keys.retain(|k| *k != key);
                }
            }
            None => {}
        }
        let Some(block) = held.get_mut(&ns, &id) else {
            debug_assert!(false, "chunk keys are recorded for held blocks only");
            self.map.remove(&(ns, key));
            return;
        };
        if block.chunk_keys.len() >= CHUNK_KEYS_PER_BLOCK_MAX {
            let oldest = block.chunk_keys.remove(0);
            self.map.remove(&(ns, oldest));
        }
        block.chunk_keys.push(key);
    }

    /// Drops the keys of a block that is no longer held.
    pub(crate) fn forget(&mut self, ns: &NamespaceKey, keys: &[ChunkKey]) {
        for k in keys {
            self.map.remove(&(*ns, *k));
        }
    }

    /// Keys mapped.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvfabric_store::SlotId;

    #[test]
    fn keys_follow_their_block_and_stay_bounded() {
        let ns = NamespaceKey::derive("a");
        let (a, b) = (BlockId([1; 32]), BlockId([2; 32]));
        let mut held = Held::default();
        held.insert(ns, a, SlotId(1));
        held.insert(ns, b, SlotId(2));
        let mut idx = ChunkIndex::default();
        let k = ChunkKey([9; 32]);
        idx.record(&mut held, ns, k, a);
        assert_eq!(idx.get(&ns, &k), Some(a));
        idx.record(&mut held, ns, k, b);
        assert_eq!(idx.get(&ns, &k), Some(b), "the latest put wins");
        assert!(held.get(&ns, &a).unwrap().chunk_keys.is_empty());
        for i in 100..(100 + CHUNK_KEYS_PER_BLOCK_MAX as u8 + 4) {
            idx.record(&mut held, ns, ChunkKey([i; 32]), a);
        }
        assert_eq!(
            held.get(&ns, &a).unwrap().chunk_keys.len(),
            CHUNK_KEYS_PER_BLOCK_MAX
        );
        assert_eq!(
            idx.get(&ns, &ChunkKey([100; 32])),
            None,
            "the oldest key was dropped"
        );
        let gone = held.remove(&ns, &a).unwrap();
        idx.forget(&ns, &gone.chunk_keys);
        assert_eq!(idx.len(), 1, "only b's key is left");
        assert_eq!(idx.get(&NamespaceKey::derive("b"), &k), None);
    }
}
